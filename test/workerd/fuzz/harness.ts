/**
 * The shared part of the API fuzzer (the property files are beside it, one per route group):
 * requests through the real Worker (SELF.fetch, real D1, Durable Objects and Queues), the
 * arbitraries, and the checks every property makes.
 *
 * The property: every malformed request gets a 4xx with a JSON body { error: { code, message } },
 * never a 5xx, and no job is stored from a rejected request. Where a random request can by
 * chance be valid (an empty tenant body, a name with an emoji), the answer must still be JSON
 * and never a 5xx, and an accepted job must read back exactly as it was sent.
 *
 * Nothing here fires a job: every job the fuzzer makes has a cron of midnight on January 1st (or
 * a first fire in 2030 or later) and the discard port 127.0.0.1:9 as its target; nothing triggers.
 *
 * Every request goes through `send`, which counts it and records any 5xx; `fuzzFile` reports the
 * count and the 5xx of a file (and asserts the 5xx to be none) once all its properties ran.
 *
 * Bugs this fuzzer found, now fixed, keep a test of their own with the shrunk counterexample in a
 * comment.
 */
import { env, SELF } from "cloudflare:test";
import fc from "fast-check";
import { afterAll, beforeAll, expect } from "vitest";
import { createJob, createTenant, TOKEN } from "../helpers";

const BASE = "https://edgecron.test";
/** The API's body limit (MAX_BODY_BYTES in src/api/auth.ts). */
export const LIMIT = 256 * 1024;
/** The discard port: were anything ever to fire, it would go nowhere. */
const TARGET_URL = "http://127.0.0.1:9/x";
const NEVER = { cron: "0 0 1 1 *", timezone: "Europe/Berlin" };
export const TIMEOUT = 120_000;

/** The valid job every mutation starts from. */
export const validJob = (name = "fuzz") => ({
  name,
  schedule: { ...NEVER },
  target: { url: TARGET_URL, method: "POST", headers: { "X-A": "b" } as Record<string, string>, body: { a: 1 } as unknown },
  retry: { maxAttempts: 3 },
  timeoutMs: 30_000,
  overlap: "allow",
  misfire: "fire_once",
  maxConcurrency: 2,
  ratePerSecond: 1,
});

// ---- sending, counting, judging ----

export type Who = "admin" | "tenant" | "none";

export interface Call {
  method: string;
  path: string;
  who?: Who;
  /** A value sent as JSON (Content-Type: application/json). */
  json?: unknown;
  /** JSON text sent as is (Content-Type: application/json); undefined: no body. */
  text?: string;
  /** Any other body, sent as is with only the headers given. */
  raw?: BodyInit;
  headers?: Record<string, string>;
}

export interface Answer {
  status: number;
  type: string;
  body: unknown;
  what: string;
}

let requests = 0;
const serverErrors: string[] = [];
let tenantKey = "";

const short = (s: string, n = 300) => (s.length <= n ? s : `${s.slice(0, n)}… (${s.length} chars)`);

function describeBody(body: BodyInit | undefined): string {
  if (body === undefined) return "none";
  if (typeof body === "string") return JSON.stringify(short(body, 200));
  if (body instanceof Uint8Array)
    return `bytes[${body.length}] ${short(Array.from(body.slice(0, 80), (b) => b.toString(16).padStart(2, "0")).join(" "), 240)}`;
  return Object.prototype.toString.call(body);
}

export async function send(call: Call): Promise<Answer> {
  const headers = new Headers(call.headers);
  const who = call.who ?? "admin";
  if (who !== "none" && !headers.has("Authorization")) headers.set("Authorization", `Bearer ${who === "admin" ? TOKEN : tenantKey}`);
  let body = call.raw;
  if (call.json !== undefined || call.text !== undefined) {
    body = call.text ?? JSON.stringify(call.json);
    if (!headers.has("Content-Type")) headers.set("Content-Type", "application/json");
  }
  requests++;
  const res = await SELF.fetch(BASE + call.path, { method: call.method, headers, body });
  const text = call.method === "HEAD" ? "" : await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const what = `${call.method} ${short(call.path, 200)} as ${who} [${[...headers]
    .filter(([k]) => k !== "authorization")
    .map(([k, v]) => `${k}: ${short(v, 60)}`)
    .join(", ")}] body ${describeBody(body)} → ${res.status} ${short(text)}`;
  if (res.status >= 500) serverErrors.push(what);
  return { status: res.status, type: res.headers.get("Content-Type") ?? "", body: parsed, what };
}

export function fail(a: Answer, why: string): never {
  throw new Error(`${why}: ${a.what}`);
}

function expectJsonError(a: Answer): void {
  if (!/^application\/json/i.test(a.type)) fail(a, "the error is not JSON");
  const error = (a.body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof error?.code !== "string" || typeof error.message !== "string") fail(a, "the body is not { error: { code, message } }");
}

/** A 4xx with the API's JSON error body; one of `statuses` when given. */
export function expectRejected(a: Answer, statuses?: readonly number[]): void {
  if (a.status < 400 || a.status >= 500) fail(a, "expected a 4xx");
  if (statuses && !statuses.includes(a.status)) fail(a, `expected ${statuses.join(" or ")}`);
  expectJsonError(a);
}

/** Never a 5xx; a JSON body either way, the error shape for a 4xx. */
export function expectAnswered(a: Answer): void {
  if (a.status >= 500) fail(a, "a 5xx");
  if (a.status >= 400) expectJsonError(a);
  else if (!/^application\/json/i.test(a.type) || a.body === undefined) fail(a, "the answer is not JSON");
}

/** The issue paths (and message) of a 400 name `field` or something inside it. */
export function expectNames(a: Answer, field: string): void {
  const error = (a.body as { error: { message: string; issues?: Array<{ path: string }> } }).error;
  const named = error.issues?.some((i) => i.path === field || i.path.startsWith(`${field}.`)) || error.message.includes(field);
  if (!named) fail(a, `the error does not name ${field}`);
}

async function jobCount(): Promise<number> {
  return (await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs").first<{ n: number }>())!.n;
}

async function jobRow(id: string): Promise<{ version: number; spec: string; name: string | null }> {
  return (await env.DB.prepare("SELECT version, spec, name FROM jobs WHERE id = ?").bind(id).first())!;
}

// ---- building bodies ----

/** A JSON literal that JSON.stringify cannot write (1e400 parses as Infinity). */
export class Raw {
  constructor(readonly text: string) {}
}

export function serialize(value: unknown): string {
  const raws: string[] = [];
  const json = JSON.stringify(value, (_key, v: unknown) => (v instanceof Raw ? `\u0000raw${raws.push(v.text) - 1}\u0000` : v));
  return json.replace(/"\\u0000raw(\d+)\\u0000"/g, (_m, i: string) => raws[Number(i)]!);
}

export const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

/** Sets a key as an own property, so that `__proto__` is a key like any other (as JSON.parse makes it). */
function put(o: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

export function setPath(root: Record<string, unknown>, path: string[], value: unknown): void {
  let o = root;
  for (const key of path.slice(0, -1)) o = o[key] as Record<string, unknown>;
  put(o, path.at(-1)!, value);
}

/** Percent-encodes every byte but the unreserved ones; lone surrogates go as U+FFFD, as a client would. */
export function pctEncode(s: string): string {
  return Array.from(new TextEncoder().encode(s), (b) =>
    /[A-Za-z0-9\-_.~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, "0")}`,
  ).join("");
}

export const whoArb = fc.constantFrom<Who>("admin", "admin", "admin", "tenant");

// ---- arbitraries ----

export const loneSurrogates = fc.string({
  unit: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: 3,
});

/** Strings meant to hurt: control characters, header injection, bidi and zero-width marks, surrogates, SQL, traversal, prototype keys. */
const HOSTILE = [
  "",
  " ",
  "\t",
  "\0",
  "a\0b",
  "%00",
  "\u0000\u0001\u001f\u007f",
  "\r\n",
  "a\r\nX-Evil: 1",
  "a\nX-Evil: 1",
  "\r\n\r\nGET / HTTP/1.1\r\nHost: x",
  "\u202eevil\u202c",
  "\u200b",
  "a\u200db",
  "\ufeff",
  "\u2028\u2029",
  "\u0085",
  "\u00a0",
  "🕐",
  "👨‍👩‍👧‍👦",
  "e\u0301",
  "Ω≈ç√∫",
  "ｆｕｌｌ",
  "𝕏",
  "\ud800",
  "\udfff",
  "a\ud800b",
  "\udc00\ud800",
  "'; DROP TABLE jobs; --",
  '" OR 1=1 --',
  "1; SELECT * FROM tenants",
  "' || (SELECT api_key FROM keys) || '",
  "../../",
  "../../etc/passwd",
  "..\\..\\",
  "%2e%2e%2f",
  "/..;/",
  "%",
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "hasOwnProperty",
  "__defineGetter__",
  "{{7*7}}",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a template-injection probe, meant to reach the server as these very characters
  "${7*7}",
  "<script>alert(1)</script>",
  "null",
  "undefined",
  "NaN",
  "-0",
  "1e309",
  "\\",
  '"',
  "\\u0000",
];

export const hostilePiece = fc.oneof(
  { arbitrary: fc.constantFrom(...HOSTILE), weight: 6 },
  { arbitrary: fc.string({ unit: "binary", maxLength: 20 }), weight: 2 },
  { arbitrary: fc.string({ unit: "grapheme", maxLength: 10 }), weight: 1 },
  { arbitrary: loneSurrogates, weight: 1 },
);

/** 10k to 300k characters of one unit: over the body limit past 256 KiB, over every field's limit well before. */
const longString = fc
  .tuple(fc.integer({ min: 10_000, max: 300_000 }), fc.constantFrom("x", "é", "🕐", "\0", "\ud800", "a\r\n", "\u202e"))
  .map(([n, unit]) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n));

export const hostileString = fc.oneof(
  { arbitrary: fc.array(hostilePiece, { minLength: 1, maxLength: 4 }).map((parts) => parts.join("")), weight: 12 },
  { arbitrary: longString, weight: 1 },
);

export const numbers = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -1, 1e21, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, 2 ** 64, 5e-324),
  fc.constantFrom(new Raw("1e400"), new Raw("-1e400")),
);
const nanish = fc.constantFrom(
  "NaN",
  "Infinity",
  "-Infinity",
  "1e309",
  "0x10",
  "30000",
  "3",
  "1",
  "-1",
  "",
  " ",
  "null",
  "true",
  "[]",
  "{}",
);
const smallJson = fc.jsonValue({ maxDepth: 2 });
export const arrays = fc.array(smallJson, { maxLength: 3 });
export const objects = fc.dictionary(fc.string({ maxLength: 8 }), smallJson, { maxKeys: 3 });
export const strings = fc.oneof(nanish, fc.string({ maxLength: 20 }));

export type Shape = { [key: string]: Shape | null };
export const SCHEDULE_SHAPE: Shape = {
  cron: null,
  timezone: null,
  at: null,
  delay: null,
  every: null,
  startAt: null,
  endAt: null,
  maxRuns: null,
};
export const JOB_SHAPE: Shape = {
  name: null,
  schedule: SCHEDULE_SHAPE,
  target: { url: null, method: null, headers: { "X-A": null }, body: { a: null } },
  retry: { maxAttempts: null, backoff: { initialMs: null, maxMs: null, factor: null }, jitter: null, retryOn: null },
  timeoutMs: null,
  overlap: null,
  misfire: null,
  catchupWindow: null,
  jitter: null,
  maxConcurrency: null,
  ratePerSecond: null,
};
export const LIMITS_SHAPE: Shape = { maxJobs: null, maxRunsInFlight: null, requestsPerSecond: null };

function shaped(shape: Shape): fc.Arbitrary<Record<string, unknown>> {
  const leaf = fc.oneof(smallJson, numbers, nanish);
  const fields = Object.fromEntries(Object.entries(shape).map(([k, sub]) => [k, sub ? fc.oneof(shaped(sub), leaf) : leaf]));
  return fc
    .tuple(
      fc.record(fields, { requiredKeys: [] }),
      fc.option(fc.tuple(fc.constantFrom("__proto__", "constructor", "prototype", "extra"), smallJson), { freq: 4 }),
    )
    .map(([o, extra]) => {
      if (extra) put(o, extra[0], extra[1]);
      return o;
    });
}

/** Body text for an endpoint: JSON values of every kind, fc.anything() where it serialises, shaped objects, and non-JSON text. */
function bodyText(shape: Shape): fc.Arbitrary<string | undefined> {
  return fc.oneof(
    fc.jsonValue().map((v) => JSON.stringify(v)),
    fc.jsonValue({ stringUnit: "binary" }).map((v) => JSON.stringify(v)),
    fc.anything().map((v) => {
      try {
        return JSON.stringify(v) as string | undefined; // undefined: no body at all
      } catch {
        return undefined;
      }
    }),
    shaped(shape).map(serialize),
    fc.string({ unit: "binary", maxLength: 40 }),
  );
}

// ---- fixtures, and what a file reports ----

export interface Fixtures {
  /** A job of the admin's that properties may try to change, and must not. */
  realJob: { id: string; version: number };
  /** A tenant other than the fuzzing one, for PATCH /v1/tenants/:id. */
  victimTenant: string;
  /** A run id of the real job that no run has. */
  fakeRun: string;
}

/**
 * Sets a file up: storage is isolated per test file, so each file makes its own tenant (whose
 * key `who: "tenant"` sends) and fixtures before its tests, and afterwards reports how many
 * requests it sent and fails on any 5xx, whichever property saw it. The fixtures are filled in
 * by the time a test runs.
 */
export function fuzzFile(name: string): Fixtures {
  const fixtures = {} as Fixtures;
  beforeAll(async () => {
    requests = 0;
    serverErrors.length = 0;
    tenantKey = (await createTenant({ requestsPerSecond: null })).apiKey;
    fixtures.victimTenant = (await createTenant({ requestsPerSecond: null })).id;
    fixtures.realJob = await createJob(validJob("fuzz-real"));
    fixtures.fakeRun = `run_${fixtures.realJob.id.slice(4)}_zzz`;
  });
  afterAll(() => {
    console.log(`fuzz (${name}): ${requests} requests, ${serverErrors.length} 5xx`);
    for (const e of serverErrors) console.log(`  5xx: ${e}`);
    expect(serverErrors).toEqual([]);
  });
  return fixtures;
}

/** What a property must leave as it was, unless it says otherwise: how many jobs there are, and the real job's version. */
export interface Catalog {
  jobs: number;
  realJobVersion: number;
}

export async function catalog(fixtures: Fixtures): Promise<Catalog> {
  return { jobs: await jobCount(), realJobVersion: (await jobRow(fixtures.realJob.id)).version };
}

/** The catalog is as `before`, but for `added` jobs (those a property accepted, read back and deleted leave none). */
export async function expectCatalog(fixtures: Fixtures, before: Catalog, added = 0): Promise<void> {
  expect(await catalog(fixtures)).toEqual({ jobs: before.jobs + added, realJobVersion: before.realJobVersion });
}

// ---- the checks of an accepted creation ----

/** Reads an accepted job back and checks it is what was sent, then deletes it. */
export async function roundTrip(sent: ReturnType<typeof validJob>, created: Answer, who: Who): Promise<void> {
  const id = (created.body as { id: string }).id;
  const got = await send({ method: "GET", path: `/v1/jobs/${id}`, who });
  if (got.status !== 200) fail(got, "an accepted job cannot be read");
  for (const [label, answer] of [
    ["created", created],
    ["read", got],
  ] as const) {
    const job = answer.body as {
      name: string | null;
      schedule: unknown;
      target: { url: string; method: string; headerNames: string[]; body?: unknown };
    };
    const expected = {
      name: sent.name,
      schedule: JSON.stringify(sent.schedule),
      url: sent.target.url.trim().replace(/[\t\n\r]/g, ""), // zod's z.url() trims and drops tabs and newlines, as the URL parser does
      method: sent.target.method,
      headerNames: JSON.stringify(Object.keys(sent.target.headers)),
      body: JSON.stringify(sent.target.body),
    };
    const actual = {
      name: job.name,
      schedule: JSON.stringify(job.schedule),
      url: job.target.url,
      method: job.target.method,
      headerNames: JSON.stringify(job.target.headerNames),
      body: JSON.stringify(job.target.body),
    };
    for (const key of Object.keys(expected) as Array<keyof typeof expected>) {
      if (actual[key] !== expected[key]) {
        fail(
          answer,
          `the job as ${label} differs in ${key}: sent ${short(JSON.stringify(expected[key]), 200)}, got ${short(JSON.stringify(actual[key]), 200)}`,
        );
      }
    }
  }
  const deleted = await send({ method: "DELETE", path: `/v1/jobs/${id}`, who });
  if (deleted.status !== 200) fail(deleted, "an accepted job cannot be deleted");
}

/**
 * Sends a job creation and checks its outcome against the catalog: an accepted job is exactly
 * one more job, read back as sent (`sent`, or only readable when null) and deleted again; a
 * refusal is a JSON 4xx (one of `statuses`, when given) that stored nothing. `refuse` names why
 * an acceptance would be wrong, if it would. Returns 1 when the job was accepted, else 0.
 */
export async function createChecked(
  call: Call,
  sent: ReturnType<typeof validJob> | null,
  opts: { statuses?: readonly number[]; refuse?: () => string | null } = {},
): Promise<0 | 1> {
  const count = await jobCount();
  const a = await send(call);
  expectAnswered(a);
  if (a.status !== 201) {
    expectRejected(a, opts.statuses);
    if ((await jobCount()) !== count) fail(a, "rejected, yet a job was stored");
    return 0;
  }
  const wrong = opts.refuse?.();
  if (wrong) fail(a, wrong);
  if ((await jobCount()) !== count + 1) fail(a, "accepted, yet not exactly one job was stored");
  if (sent) {
    await roundTrip(sent, a, call.who ?? "admin");
    return 1;
  }
  const id = (a.body as { id: string }).id;
  const got = await send({ method: "GET", path: `/v1/jobs/${id}`, who: call.who });
  if (got.status !== 200) fail(got, "an accepted job cannot be read");
  const deleted = await send({ method: "DELETE", path: `/v1/jobs/${id}`, who: call.who });
  if (deleted.status !== 200) fail(deleted, "an accepted job cannot be deleted");
  return 1;
}

// ---- arbitrary JSON bodies, a property every route group has ----

export interface Endpoint {
  label: string;
  method: string;
  path: () => string;
  shape: Shape;
  /** Statuses a random body may earn by being valid by chance. */
  accepted: number[];
  numRuns: number;
}

export const ARBITRARY_BODIES_TITLE = "$label ($numRuns runs): 4xx JSON, or a real success; never a 5xx; nothing stored";

/**
 * Random bodies (any JSON, non-JSON text, objects with the endpoint's own keys) to one endpoint:
 * a JSON 4xx, or one of its `accepted` statuses; the job count never changes, and the real job
 * changes version only through an accepted PATCH of it.
 */
export async function arbitraryBodies(fixtures: Fixtures, ep: Endpoint): Promise<void> {
  const { realJob } = fixtures;
  const before = await jobCount();
  let version = (await jobRow(realJob.id)).version;
  await fc.assert(
    fc.asyncProperty(bodyText(ep.shape), whoArb, async (text, who) => {
      const count = await jobCount();
      const a = await send({ method: ep.method, path: ep.path(), who, text });
      expectAnswered(a);
      const row = await jobRow(realJob.id);
      if (ep.accepted.includes(a.status)) {
        if (ep.label === "PATCH /v1/jobs/:id") version += 1;
      } else {
        expectRejected(a);
      }
      if (row.version !== version) fail(a, `the real job is at version ${row.version}, expected ${version}`);
      if ((await jobCount()) !== count) fail(a, "the job count changed");
    }),
    { numRuns: ep.numRuns },
  );
  expect(await jobCount()).toBe(before);
}
