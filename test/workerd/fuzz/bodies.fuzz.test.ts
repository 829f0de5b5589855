/** The API fuzzer (see harness.ts), request bodies on any route: over the size limit, nested deep, with huge objects, invalid UTF-8. */
import fc from "fast-check";
import { describe, it } from "vitest";
import {
  catalog,
  createChecked,
  expectCatalog,
  expectNames,
  expectRejected,
  fail,
  fuzzFile,
  LIMIT,
  send,
  setPath,
  TIMEOUT,
  validJob,
  whoArb,
} from "./harness";

const fx = fuzzFile("bodies");

describe("huge and deeply nested bodies", () => {
  /** JSON text of `size` bytes: a valid job whose name pads it out, or bytes that are no JSON at all. */
  function sized(size: number, kind: "job" | "junk" | "array"): string {
    if (kind === "junk") return "x".repeat(size);
    if (kind === "array") return `[${"0,".repeat(Math.floor((size - 3) / 2))}0]`.padEnd(size, " ");
    const shell = JSON.stringify(validJob(""));
    return shell.replace('"name":""', `"name":"${"n".repeat(size - shell.length)}"`);
  }

  it(
    "bodies over 256 KiB (12 runs) → 413 JSON, whether sent with a length or streamed; nothing stored",
    async () => {
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: LIMIT + 1, max: 4 * LIMIT }),
          fc.constantFrom("job", "junk", "array") as fc.Arbitrary<"job" | "junk" | "array">,
          fc.boolean(),
          whoArb,
          fc.constantFrom("/v1/jobs", "/v1/schedules/preview", "/v1/tenants"),
          async (size, kind, streamed, who, path) => {
            const bytes = new TextEncoder().encode(sized(size, kind));
            const raw = streamed
              ? new ReadableStream<Uint8Array>({
                  start(c) {
                    for (let i = 0; i < bytes.length; i += 64 * 1024) c.enqueue(bytes.slice(i, i + 64 * 1024));
                    c.close();
                  },
                })
              : bytes;
            const a = await send({ method: "POST", path, who, raw, headers: { "Content-Type": "application/json" } });
            expectRejected(a, [413]);
          },
        ),
        { numRuns: 12 },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );

  it("a body of exactly 256 KiB is read (400: the name is too long), one byte more is 413", async () => {
    const at = await send({ method: "POST", path: "/v1/jobs", text: sized(LIMIT, "job") });
    expectRejected(at, [400]);
    expectNames(at, "name");
    const over = await send({ method: "POST", path: "/v1/jobs", text: sized(LIMIT + 1, "job") });
    expectRejected(over, [413]);
  });

  it(
    "nesting 1,000 to 100,000 deep (24 runs), as the body or inside it → 4xx, nothing stored",
    async () => {
      const NEST = "\u0001NEST\u0001";
      /** Where the nested value goes, per endpoint (field paths of its body). */
      const PLACES: Record<string, string[][]> = {
        "/v1/jobs": [[], ["target", "body"], ["name"], ["schedule"], ["schedule", "cron"], ["target", "headers"], ["retry"]],
        PATCH: [[], ["target", "body"], ["name"], ["schedule"], ["retry"]],
        "/v1/schedules/preview": [[], ["schedule"], ["schedule", "cron"], ["count"], ["from"]],
      };
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1_000, max: 100_000 }),
          fc.constantFrom("array", "object"),
          fc
            .constantFrom(...Object.keys(PLACES))
            .chain((endpoint) => fc.tuple(fc.constant(endpoint), fc.constantFrom(...PLACES[endpoint]!))),
          whoArb,
          async (depth, kind, [endpoint, place], who) => {
            const nested = kind === "array" ? `${"[".repeat(depth)}${"]".repeat(depth)}` : `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
            const base = (endpoint === "/v1/schedules/preview" ? { schedule: { cron: "0 0 1 1 *" }, count: 1 } : validJob()) as Record<
              string,
              unknown
            >;
            if (place.length > 0) setPath(base, place, NEST);
            const text = place.length === 0 ? nested : JSON.stringify(base).replace(JSON.stringify(NEST), nested);
            const call = endpoint === "PATCH" ? { method: "PATCH", path: `/v1/jobs/${fx.realJob.id}` } : { method: "POST", path: endpoint };
            const a = await send({ ...call, who, text });
            expectRejected(a);
          },
        ),
        { numRuns: 24 },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );

  it(
    "objects of 1,000 to 100,000 keys and arrays of up to 100,000 items (16 runs) → 4xx, or accepted and read back; never 5xx",
    async () => {
      // 100k keys do not fit in 256 KiB (the shortest keys take ~7 bytes each): those are 413.
      let made = 0;
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1_000, max: 100_000 }),
          fc.constantFrom("object", "array"),
          fc.constantFrom("whole", "target.body", "target.headers", "schedule", "retry"),
          whoArb,
          async (n, kind, where, who) => {
            const many: unknown =
              kind === "array"
                ? new Array<number>(n).fill(0)
                : Object.fromEntries(Array.from({ length: n }, (_, i) => [i.toString(36), 0]));
            const sent = validJob("many") as ReturnType<typeof validJob> & Record<string, unknown>;
            const body: unknown = where === "whole" ? many : sent;
            if (where === "target.body") sent.target.body = many;
            if (where === "target.headers") sent.target.headers = many as Record<string, string>;
            if (where === "schedule") (sent as Record<string, unknown>).schedule = many;
            if (where === "retry") (sent as Record<string, unknown>).retry = many;
            made += await createChecked({ method: "POST", path: "/v1/jobs", who, json: body }, sent, {
              refuse: () => (where === "target.body" ? null : "accepted a job with a huge object where none may be"),
            });
          },
        ),
        { numRuns: 16 },
      );
      await expectCatalog(fx, before, made);
    },
    TIMEOUT,
  );
});

describe("invalid UTF-8", () => {
  /** Byte sequences no UTF-8 decoder may accept. */
  const BAD: number[][] = [
    [0xff],
    [0xfe],
    [0xff, 0xfe],
    [0x80], // a lone continuation byte
    [0xc0, 0xaf], // overlong "/"
    [0xc1, 0xbf],
    [0xe0, 0x80, 0xaf], // overlong
    [0xf0, 0x80, 0x80, 0xaf],
    [0xed, 0xa0, 0x80], // an encoded surrogate (CESU-8 / WTF-8)
    [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
    [0xf8, 0x88, 0x80, 0x80, 0x80], // a 5-byte form
    [0xe2, 0x82], // truncated (€ is e2 82 ac)
    [0xf0, 0x9f, 0x95], // truncated emoji
    [0xc3], // truncated é
  ];
  const fatal = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
  const isValidUtf8 = (bytes: Uint8Array) => {
    try {
      fatal.decode(bytes);
      return true;
    } catch {
      return false;
    }
  };
  /** Random bytes with a sequence from BAD somewhere in them: never valid UTF-8. */
  const badBytes = fc
    .oneof(
      fc
        .tuple(fc.uint8Array({ maxLength: 8 }), fc.constantFrom(...BAD), fc.uint8Array({ maxLength: 8 }))
        .map(([a, bad, b]) => new Uint8Array([...a, ...bad, ...b])),
      fc.uint8Array({ minLength: 1, maxLength: 16 }).filter((b) => !isValidUtf8(b)),
    )
    .filter((b) => !isValidUtf8(b));

  const MARK = "\u0001SPLICE\u0001";
  const TEMPLATES: Array<[string, string, string]> = (() => {
    const job = (place: (j: ReturnType<typeof validJob>) => void) => {
      const j = validJob();
      place(j);
      return JSON.stringify(j);
    };
    return [
      ["POST", "/v1/jobs", job((j) => (j.name = MARK))],
      ["POST", "/v1/jobs", job((j) => (j.schedule.cron = `0 0 1 1 *${MARK}`))],
      ["POST", "/v1/jobs", job((j) => (j.target.url = `http://127.0.0.1:9/${MARK}`))],
      ["POST", "/v1/jobs", job((j) => (j.target.headers = { "X-A": MARK }))],
      ["POST", "/v1/jobs", job((j) => (j.target.body = { a: MARK }))],
      ["POST", "/v1/jobs", `${job(() => {})}${JSON.stringify(MARK).slice(1, -1)}`], // after the JSON
      ["PATCH", "/v1/jobs/:id", JSON.stringify({ name: MARK })],
      ["POST", "/v1/schedules/preview", JSON.stringify({ schedule: { cron: `0 0 1 1 *${MARK}` } })],
      ["POST", "/v1/tenants", JSON.stringify({ name: MARK })],
    ];
  })();

  it(
    "200 runs: raw bytes spliced into a valid body → 400 JSON, nothing stored",
    async () => {
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...TEMPLATES), badBytes, whoArb, async ([method, path, template], bad, who) => {
          const [head, tail] = template.split(JSON.stringify(MARK).slice(1, -1)).map((s) => new TextEncoder().encode(s)) as [
            Uint8Array,
            Uint8Array,
          ];
          const raw = new Uint8Array([...head, ...bad, ...tail]);
          const a = await send({
            method,
            path: path.replace(":id", fx.realJob.id),
            who,
            raw,
            headers: { "Content-Type": "application/json" },
          });
          expectRejected(a, [400]);
          if (!(a.body as { error: { message: string } }).error.message.includes("UTF-8")) fail(a, "the error does not say UTF-8");
        }),
        { numRuns: 200 },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );
});
