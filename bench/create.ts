// `npm run bench:create`: how fast jobs can be created through the public API on the local stack
// (test/support/local-stack.ts, as `npm start` runs it): N jobs one request each with C requests
// in flight, then N jobs in batches (POST /v1/jobs/batch) with B batches in flight. Prints jobs/s
// and request latencies; exits 0 whatever it measured, 1 when the stack would not start.
//
//   npm run bench:create                          # 10,000 jobs each way, 16 single requests and 2 batches in flight
//   npm run bench:create -- --jobs 2000 --mode single --concurrency 32
//   npm run bench:create -- --requests-per-second 10000   # the tenants' request rate raised (null: none)
//
// The jobs are created as a tenant would create them: each phase (the warm-up, the single
// creates, the batches) with the API key of a tenant of its own, made through POST /v1/tenants
// with the default limits (10,000 jobs, 100 requests a second) unless --requests-per-second says
// otherwise. A 429 is followed as the API advises: the request is sent again after its
// Retry-After, and counted. So with the default limits a tenant's single creates are capped at
// its 100 requests a second, whatever the server could do; the server's own capacity is what a
// raised rate measures.
//
// The jobs are one-off, a year ahead, at a target on 127.0.0.1 that nothing listens on: nothing
// runs during the measurement, which is of creation alone. Talks only to 127.0.0.1.
import { randomBytes } from "node:crypto";
import { loadavg } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { freePort, type Stack, startStack } from "../test/support/local-stack.ts";
import { type CpuBreakdown, startCpuProfile } from "./cpu-profile.ts";
import { cpuBetween, groupCpu, workerdTotal } from "./process-cpu.ts";
import { round, summarize } from "./stats.ts";

const { values: args } = parseArgs({
  options: {
    jobs: { type: "string", default: process.env.BENCH_JOBS ?? "10000" },
    mode: { type: "string", default: "both" },
    concurrency: { type: "string", default: "16" },
    "batch-size": { type: "string", default: "1000" },
    "batch-concurrency": { type: "string", default: "2" },
    warmup: { type: "string", default: "200" },
    profile: { type: "boolean", default: false },
    "requests-per-second": { type: "string", default: "default" },
  },
});
const N = Number(args.jobs);
const C = Number(args.concurrency);
const BATCH = Number(args["batch-size"]);
const BC = Number(args["batch-concurrency"]);
const WARMUP = Number(args.warmup);
const RPS = args["requests-per-second"];
/** The tenants' limits as POST /v1/tenants takes them: none given is the defaults. */
const LIMITS = RPS === "default" ? {} : { requestsPerSecond: RPS === "null" ? null : Number(RPS) };
if (
  ![N, C, BATCH, BC, WARMUP].every((n) => Number.isInteger(n) && n >= 0) ||
  !["single", "batch", "both"].includes(args.mode) ||
  (RPS !== "default" && RPS !== "null" && !(Number.isInteger(Number(RPS)) && Number(RPS) >= 1))
) {
  console.error(
    "usage: bench:create [--jobs N] [--mode single|batch|both] [--concurrency C] [--batch-size S] [--batch-concurrency B] [--requests-per-second R|null]",
  );
  process.exit(2);
}

const t0 = Date.now();
const say = (msg: string) => console.log(`[bench:create +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

/** The burst bench's kind of job (bench/workload.ts): one-off, each at its own instant, here a year ahead. */
const FIRST_AT = Date.now() + 365 * 86_400_000;
const jobBody = (i: number) => ({
  name: `create-${i}`,
  schedule: { at: new Date(FIRST_AT + i * 1_000).toISOString() },
  target: { url: `http://127.0.0.1:9/bench-create/${i}`, method: "POST", body: { i } },
  breaker: false,
});

interface Figures {
  mode: string;
  created: number;
  failed: number;
  /** Requests answered 429 (the tenant's request rate) and sent again after their Retry-After. */
  limited: number;
  seconds: number;
  jobsPerSecond: number;
  /** Each request's time, of those not answered 429. */
  requestMs: ReturnType<typeof summarize>;
  failures: Record<string, number>;
  /** The CPU ms per job created (user + system) of every workerd of the stack (the scheduler's and the idle runner's), from /proc. */
  workerdCpuMsPerJob: number | null;
  profile?: CpuBreakdown;
}

/** What one call made: jobs created and not, why not, the 429s it waited out, and its last request's time. */
interface Made {
  made: number;
  failed: number;
  failure?: string;
  limited: number;
  ms: number;
}

/** Calls `call(i)` for i in [0, count) with `inFlight` at once. */
async function drive(stack: Stack, mode: string, count: number, inFlight: number, call: (i: number) => Promise<Made>): Promise<Figures> {
  let next = 0;
  let created = 0;
  let failed = 0;
  let limited = 0;
  const ms: number[] = [];
  const failures = new Map<string, number>();
  const cpuBefore = groupCpu(stack.pgid);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.max(1, inFlight) }, async () => {
      while (next < count) {
        const i = next++;
        const answer = await call(i).catch(
          (err: Error): Made => ({ made: 0, failed: 1, failure: err.message, limited: 0, ms: Number.NaN }),
        );
        if (!Number.isNaN(answer.ms)) ms.push(answer.ms);
        created += answer.made;
        failed += answer.failed;
        limited += answer.limited;
        if (answer.failure) failures.set(answer.failure, (failures.get(answer.failure) ?? 0) + 1);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpuAfter = groupCpu(stack.pgid);
  const workerd = cpuBefore && cpuAfter ? workerdTotal(cpuBetween(cpuBefore, cpuAfter)) : null;
  return {
    mode,
    created,
    failed,
    limited,
    seconds: round(seconds, 2)!,
    jobsPerSecond: round(created / seconds, 0)!,
    requestMs: summarize(ms.map((x) => round(x)!)),
    failures: Object.fromEntries(failures),
    workerdCpuMsPerJob: workerd && created > 0 ? round((workerd.user + workerd.system) / created, 3) : null,
  };
}

/** `measure()` under a CPU profile of the Worker when --profile asks for one. */
async function profiled(inspectorPort: number | null, measure: () => Promise<Figures>): Promise<Figures> {
  if (inspectorPort === null) return measure();
  const profiler = await startCpuProfile(inspectorPort);
  const figures = await measure();
  return { ...figures, profile: await profiler.stop() };
}

/** A tenant of its own for a phase, made with the admin token: its API key. */
async function tenantKey(stack: Stack, name: string): Promise<string> {
  const r = await stack.api("POST", "/v1/tenants", { name, limits: LIMITS });
  if (r.status !== 201) throw new Error(`POST /v1/tenants: HTTP ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
  return (r.json as { apiKey: string }).apiKey;
}

/** A request sent again after each 429's Retry-After, as the API advises; its last answer, the 429s, and that answer's time. */
async function following(send: () => ReturnType<Stack["api"]>) {
  for (let limited = 0; ; limited++) {
    const at = performance.now();
    const r = await send();
    const ms = performance.now() - at;
    if (r.status !== 429) return { r, limited, ms };
    await sleep(Number(r.headers.get("Retry-After") ?? "1") * 1000);
  }
}

const single = (stack: Stack, key: string, offset: number) => async (i: number) => {
  const { r, limited, ms } = await following(() => stack.api("POST", "/v1/jobs", jobBody(offset + i), { timeoutMs: 60_000, token: key }));
  return r.status === 201
    ? { made: 1, failed: 0, limited, ms }
    : { made: 0, failed: 1, failure: `HTTP ${r.status} ${JSON.stringify(r.json).slice(0, 100)}`, limited, ms };
};

const batched = (stack: Stack, key: string, offset: number, total: number) => async (b: number) => {
  const from = offset + b * BATCH;
  const jobs = Array.from({ length: Math.min(BATCH, offset + total - from) }, (_, k) => jobBody(from + k));
  const { r, limited, ms } = await following(() => stack.api("POST", "/v1/jobs/batch", { jobs }, { timeoutMs: 120_000, token: key }));
  if (r.status !== 200) {
    return { made: 0, failed: jobs.length, failure: `HTTP ${r.status} ${JSON.stringify(r.json).slice(0, 100)}`, limited, ms };
  }
  const results = (r.json as { results: Array<{ status: number }> }).results;
  const made = results.filter((x) => x.status === 201).length;
  return { made, failed: jobs.length - made, ...(made < jobs.length && { failure: "some items refused" }), limited, ms };
};

async function main(): Promise<number> {
  say(`starting the stack (snapshot of the working tree)`);
  const inspectorPort = args.profile ? await freePort() : null;
  let stack: Stack;
  try {
    stack = await startStack({
      ...(inspectorPort !== null && { env: { INSPECTOR_PORT: String(inspectorPort) } }),
      snapshot: true,
      token: randomBytes(16).toString("hex"),
      dirPrefix: "edgecron-bench-create-",
      killOnExit: true,
    });
  } catch (err) {
    console.error(`the stack did not start: ${(err as Error).message}`);
    return 1;
  }
  const stop = () => stack.stop().catch((err: Error) => say(`stopping the stack: ${err.message}`));
  process.once("SIGINT", () => void stop().then(() => process.exit(130)));
  const results: Figures[] = [];
  try {
    say(`stack on ${stack.base}; tenants' limits: ${RPS === "default" ? "the defaults" : JSON.stringify(LIMITS)}`);
    say(`warming up with ${WARMUP} single creates`);
    await drive(stack, "warmup", WARMUP, C, single(stack, await tenantKey(stack, "bench-create-warmup"), 0));
    let offset = WARMUP;
    if (args.mode !== "batch") {
      const key = await tenantKey(stack, "bench-create-single");
      say(`creating ${N} jobs one a request, ${C} in flight`);
      results.push(await profiled(inspectorPort, () => drive(stack, `single (${C} in flight)`, N, C, single(stack, key, offset))));
      offset += N;
    }
    if (args.mode !== "single") {
      const key = await tenantKey(stack, "bench-create-batch");
      const batches = Math.ceil(N / BATCH);
      say(`creating ${N} jobs in ${batches} batches of ${BATCH}, ${BC} in flight`);
      const mode = `batches of ${BATCH} (${BC} in flight)`;
      results.push(await profiled(inspectorPort, () => drive(stack, mode, batches, BC, batched(stack, key, offset, N))));
    }
  } finally {
    await stop();
  }
  console.log("\nmode                           created  failed     429  seconds   jobs/s  workerd CPU ms/job  request ms p50 / p99");
  for (const r of results) {
    console.log(
      `${r.mode.padEnd(30)} ${String(r.created).padStart(7)} ${String(r.failed).padStart(7)} ${String(r.limited).padStart(7)} ${String(r.seconds).padStart(8)} ${String(r.jobsPerSecond).padStart(8)}  ${String(r.workerdCpuMsPerJob).padStart(18)}  ${r.requestMs.p50} / ${r.requestMs.p99}`,
    );
    if (r.profile) {
      const top = r.profile.topModules.slice(0, 12).map((m) => `${m.module} ${round(m.ms, 0)} ms`);
      console.log(
        `    profile: ${JSON.stringify(r.profile.msByPart)}, runtime ${round(r.profile.runtimeMs, 0)} ms, idle ${round(r.profile.idleMs, 0)} ms`,
      );
      console.log(`    top modules: ${top.join("; ")}`);
    }
    for (const [why, n] of Object.entries(r.failures)) console.log(`    ${n} × ${why}`);
  }
  console.log(
    `load average at the end: ${loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`,
  );
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
