/** The API fuzzer (see harness.ts), jobs: POST /v1/jobs, PATCH /v1/jobs/:id and backfill (arbitrary bodies), every field of a job (wrong types, hostile strings), content types. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ARBITRARY_BODIES_TITLE,
  arbitraryBodies,
  arrays,
  type Call,
  catalog,
  clone,
  createChecked,
  type Endpoint,
  expectCatalog,
  expectNames,
  expectRejected,
  fuzzFile,
  hostileString,
  JOB_SHAPE,
  loneSurrogates,
  numbers,
  objects,
  Raw,
  roundTrip,
  send,
  serialize,
  setPath,
  strings,
  TIMEOUT,
  validJob,
  whoArb,
} from "./harness";

const fx = fuzzFile("jobs");

type Kind =
  | { type: "string" }
  | { type: "object" }
  | { type: "record" }
  | { type: "body" }
  | { type: "int" | "number"; min: number; max: number }
  | { type: "enum"; values: readonly string[] };

/** Values of the wrong type (or out of range, for numbers) for a field of this kind. */
function wrongFor(kind: Kind): fc.Arbitrary<unknown> {
  const scalars = fc.oneof(fc.boolean(), fc.constant(null));
  switch (kind.type) {
    case "string":
      return fc.oneof(numbers, scalars, arrays, objects);
    case "object":
    case "record":
      return fc.oneof(numbers, strings, scalars, arrays);
    case "body":
      return fc.oneof(numbers, scalars);
    case "enum":
      return fc.oneof(
        numbers,
        scalars,
        arrays,
        objects,
        fc
          .oneof(strings, fc.constantFrom(...kind.values.flatMap((v) => [v.toUpperCase(), v.toLowerCase(), ` ${v}`, `${v}\0`])))
          .filter((s) => !kind.values.includes(s)),
      );
    case "int":
    case "number": {
      const { min, max } = kind;
      const outOfRange = fc.oneof(
        fc.double({ max: min, maxExcluded: true, noNaN: true, noDefaultInfinity: true }),
        fc.double({ min: max, minExcluded: true, noNaN: true, noDefaultInfinity: true }),
        fc.constantFrom(-1, 0, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2).filter((n) => n < min || n > max),
        fc.constantFrom(new Raw("1e400"), new Raw("-1e400")),
      );
      const fractional = fc.double({ min, max, noNaN: true }).filter((n) => !Number.isInteger(n));
      return fc.oneof(strings, scalars, arrays, objects, outOfRange, ...(kind.type === "int" ? [fractional] : []));
    }
  }
}

const STRING: Kind = { type: "string" };
const OBJECT: Kind = { type: "object" };
const WRONG_TYPE_FIELDS: Array<[string, Kind]> = [
  ["name", STRING],
  ["schedule", OBJECT],
  ["schedule.cron", STRING],
  ["schedule.timezone", STRING],
  ["target", OBJECT],
  ["target.url", STRING],
  ["target.method", { type: "enum", values: ["GET", "POST", "PUT", "PATCH", "DELETE"] }],
  ["target.headers", { type: "record" }],
  ["target.headers.X-A", STRING],
  ["target.body", { type: "body" }],
  ["retry", OBJECT],
  ["retry.maxAttempts", { type: "int", min: 1, max: 20 }],
  ["timeoutMs", { type: "int", min: 1_000, max: 900_000 }],
  ["overlap", { type: "enum", values: ["allow", "forbid", "buffer_one", "replace"] }],
  ["misfire", { type: "enum", values: ["skip", "fire_once", "catch_up"] }],
  ["maxConcurrency", { type: "int", min: 1, max: 1_000 }],
  ["ratePerSecond", { type: "number", min: 0.001, max: 1_000 }],
];

/** Objects with an endpoint's own keys (and some others), random values: they get past the first checks. */

describe("arbitrary JSON bodies", () => {
  const ENDPOINTS: Endpoint[] = [
    { label: "POST /v1/jobs", method: "POST", path: () => "/v1/jobs", shape: JOB_SHAPE, accepted: [], numRuns: 250 },
    {
      label: "PATCH /v1/jobs/:id",
      method: "PATCH",
      path: () => `/v1/jobs/${fx.realJob.id}`,
      shape: JOB_SHAPE,
      accepted: [200],
      numRuns: 200,
    },
    {
      label: "POST /v1/jobs/:id/backfill",
      method: "POST",
      path: () => `/v1/jobs/${fx.realJob.id}/backfill`,
      shape: { from: null, to: null },
      accepted: [202],
      numRuns: 150,
    },
  ];

  it.each(ENDPOINTS)(ARBITRARY_BODIES_TITLE, (ep) => arbitraryBodies(fx, ep), TIMEOUT);
});

describe("wrong types in every field of a valid job", () => {
  const RUNS = 20;
  it.each(WRONG_TYPE_FIELDS)(
    `%s (${RUNS} runs) → 400 naming the field, nothing stored`,
    async (field, kind) => {
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(wrongFor(kind), whoArb, async (value, who) => {
          const body = clone(validJob(`wrong-${field}`)) as unknown as Record<string, unknown>;
          setPath(body, field.split("."), value);
          const a = await send({ method: "POST", path: "/v1/jobs", who, text: serialize(body) });
          expectRejected(a, [400]);
          expectNames(a, field);
        }),
        { numRuns: RUNS },
      );
      await expectCatalog(fx, before);
    },
    TIMEOUT,
  );

  it("the valid job itself is accepted, and reads back as sent", async () => {
    const sent = validJob("fuzz-valid");
    const a = await send({ method: "POST", path: "/v1/jobs", json: sent });
    expect(a.status, a.what).toBe(201);
    await roundTrip(sent, a, "admin");
  });
});

describe("hostile strings in every string field", () => {
  type Job = ReturnType<typeof validJob>;
  /** Where a hostile string goes: every string field of a job, and object keys (header names, body keys). */
  const SLOTS: Array<[string, (job: Job, s: string) => void]> = [
    ["name", (j, s) => (j.name = s)],
    ["schedule.cron", (j, s) => (j.schedule.cron = s)],
    ["schedule.timezone", (j, s) => (j.schedule.timezone = s)],
    ["target.url", (j, s) => (j.target.url = s)],
    ["target.url (path)", (j, s) => (j.target.url = `http://127.0.0.1:9/${s}`)],
    ["target.url (query)", (j, s) => (j.target.url = `http://127.0.0.1:9/x?q=${s}`)],
    ["target.url (host)", (j, s) => (j.target.url = `http://${s}:9/x`)],
    ["target.headers (name)", (j, s) => (j.target.headers = { [s]: "v" })],
    ["target.headers (value)", (j, s) => (j.target.headers = { "X-A": s })],
    ["target.body (string)", (j, s) => (j.target.body = s)],
    ["target.body (value)", (j, s) => (j.target.body = { a: s, list: [s] })],
    ["target.body (key)", (j, s) => (j.target.body = { [s]: 1 })],
    ["overlap", (j, s) => (j.overlap = s)],
    ["target.method", (j, s) => (j.target.method = s)],
  ];

  it(
    "300 runs: 4xx JSON, or accepted and read back exactly; never a 5xx",
    async () => {
      let made = 0;
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...SLOTS), hostileString, whoArb, async ([, place], s, who) => {
          const sent = validJob("hostile");
          place(sent, s);
          made += await createChecked({ method: "POST", path: "/v1/jobs", who, json: sent }, sent);
        }),
        { numRuns: 300 },
      );
      await expectCatalog(fx, before, made);
    },
    TIMEOUT,
  );

  // Found by this fuzzer: a name with a lone surrogate (valid JSON "\ud800") was accepted and
  // echoed, but D1 stores UTF-8 and read it back as U+FFFD. Such text is now refused.
  it("a name with a lone surrogate is refused or reads back exactly", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.tuple(fc.string({ maxLength: 5 }), loneSurrogates, fc.string({ maxLength: 5 })).map((p) => p.join("")),
        whoArb,
        async (name, who) => {
          const sent = validJob(name);
          const a = await send({ method: "POST", path: "/v1/jobs", who, json: sent });
          if (a.status === 201) await roundTrip(sent, a, who);
          else expectRejected(a, [400]);
        },
      ),
      { numRuns: 20 },
    );
  });

  // Found by this fuzzer: "__proto__" as a header name or a body key was accepted and silently
  // dropped (z.record rebuilds the object). Now the header is refused and the body key kept.
  it("__proto__ as a header name or body key is refused or kept", async () => {
    for (const place of ["headers", "body"] as const) {
      const sent = validJob("proto-key");
      sent.target[place] = JSON.parse('{"__proto__": "v"}') as Record<string, string>;
      const a = await send({ method: "POST", path: "/v1/jobs", json: sent });
      if (a.status === 201) await roundTrip(sent, a, "admin");
      else expectRejected(a, [400]);
    }
  });

  it("prototype keys as a whole body, in schedule, target and retry → 400", async () => {
    const bodies = [
      '{"__proto__": {"schedule": {"cron": "0 0 1 1 *"}, "target": {"url": "http://127.0.0.1:9/x"}}}',
      `{"__proto__": {"polluted": true}, ${JSON.stringify(validJob()).slice(1)}`,
      `{"constructor": {"prototype": {"polluted": true}}, ${JSON.stringify(validJob()).slice(1)}`,
      JSON.stringify({ ...validJob(), schedule: JSON.parse('{"cron": "0 0 1 1 *", "__proto__": {"every": "1s"}}') as unknown }),
      JSON.stringify({ ...validJob(), target: JSON.parse('{"url": "http://127.0.0.1:9/x", "__proto__": {"method": "GET"}}') as unknown }),
      JSON.stringify({ ...validJob(), retry: JSON.parse('{"maxAttempts": 3, "__proto__": {"maxAttempts": 20}}') as unknown }),
    ];
    const before = await catalog(fx);
    for (const text of bodies) {
      for (const who of ["admin", "tenant"] as const) {
        const a = await send({ method: "POST", path: "/v1/jobs", who, text });
        expectRejected(a, [400]);
      }
    }
    await expectCatalog(fx, before);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe("wrong content types", () => {
  const TYPES = [
    "text/plain",
    "text/plain; charset=utf-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/jsonx",
    "application/json-patch+json",
    "application/vnd.api+json",
    "application/ld+json",
    "text/json",
    "json",
    "application/*",
    "*/*",
    "application/octet-stream",
    "application/xml",
    "application/json, text/plain",
    "application/json;",
    "application/json; charset=latin1",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "application/json;foo=bar;baz=1",
    "application/json ; charset=utf-8",
  ];
  /** Any header value a client can send. */
  const randomType = fc.string({ unit: "binary-ascii", maxLength: 40 }).filter((v) => {
    try {
      new Headers({ "Content-Type": v });
      return true;
    } catch {
      return false;
    }
  });

  it(
    "200 runs: a valid job under any other type → 415 JSON, nothing stored; application/json with any parameters is read",
    async () => {
      let made = 0;
      const before = await catalog(fx);
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(fc.constantFrom(...TYPES), randomType, fc.constant<"none">("none"), fc.constant<"form">("form")),
          whoArb,
          async (type, who) => {
            const sent = validJob("content-type");
            const text = JSON.stringify(sent);
            let call: Call;
            if (type === "none")
              call = { method: "POST", path: "/v1/jobs", who, raw: new TextEncoder().encode(text) }; // no Content-Type at all
            else if (type === "form") {
              const form = new FormData();
              form.set("json", text);
              call = { method: "POST", path: "/v1/jobs", who, raw: form }; // multipart with a real boundary
            } else call = { method: "POST", path: "/v1/jobs", who, raw: new TextEncoder().encode(text), headers: { "Content-Type": type } };
            const essence = type.split(";")[0]!.trim().toLowerCase();
            made += await createChecked(call, sent, {
              statuses: essence === "application/json" ? [400, 415] : [415],
              refuse: () => (essence === "application/json" ? null : `accepted a body sent as ${JSON.stringify(type)}`),
            });
          },
        ),
        { numRuns: 200 },
      );
      await expectCatalog(fx, before, made);
    },
    TIMEOUT,
  );

  it("application/json with any parameters is accepted; a bare or suffixed other type is 415", async () => {
    for (const type of ["application/json; charset=latin1", "APPLICATION/JSON", "application/json;foo=bar;baz=1"]) {
      const sent = validJob("ct-ok");
      const a = await send({ method: "POST", path: "/v1/jobs", text: JSON.stringify(sent), headers: { "Content-Type": type } });
      expect(a.status, a.what).toBe(201);
      await roundTrip(sent, a, "admin");
    }
    for (const type of ["application/jsonx", "text/plain", "application/x-www-form-urlencoded"]) {
      const a = await send({ method: "POST", path: "/v1/jobs", text: JSON.stringify(validJob()), headers: { "Content-Type": type } });
      expectRejected(a, [415]);
    }
  });
});
