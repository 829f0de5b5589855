// `npm run bench:qstash`: the hot path of a QStash user on edgecron's /v2 (docs/qstash.md),
// driven by the @upstash/qstash SDK on the local stack (test/support/local-stack.ts, as `npm
// start` runs it): N messages published one request each with C in flight, then N in batches of
// B (POST /v2/batch); messages accepted per second, and publish → delivery lag (from the
// publish's answer to the target's receipt) at a receiver on 127.0.0.1. Beside it, when
// redis-server is installed, BullMQ's add → process on the same machine: N `queue.add` with C in
// flight and N in `addBulk` of B, a Worker (concurrency 50) whose processor makes the same POST.
//
//   npm run bench:qstash                      # 2,000 messages each way, 16 publishes and 2 batches in flight
//   npm run bench:qstash -- --messages 500 --concurrency 32
//
// Exits 0 whatever it measured, 1 when the stack would not start. Talks only to 127.0.0.1.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { Client } from "@upstash/qstash";
import { Queue, Worker } from "bullmq";
import { type Stack, startStack } from "../test/support/local-stack.ts";
import { findRedisServer, type RedisServer, startRedis } from "./redis.ts";
import { round, summarize } from "./stats.ts";

const { values: args } = parseArgs({
  options: {
    messages: { type: "string", default: process.env.BENCH_MESSAGES ?? "2000" },
    concurrency: { type: "string", default: "16" },
    "batch-size": { type: "string", default: "100" },
    "batch-concurrency": { type: "string", default: "2" },
    "settle-ms": { type: "string", default: "120000" },
  },
});
const N = Number(args.messages);
const C = Number(args.concurrency);
const B = Number(args["batch-size"]);
const BC = Number(args["batch-concurrency"]);
const SETTLE_MS = Number(args["settle-ms"]);
if (![N, C, B, BC, SETTLE_MS].every((n) => Number.isInteger(n) && n > 0)) {
  console.error("usage: bench:qstash [--messages N] [--concurrency C] [--batch-size B] [--batch-concurrency BC] [--settle-ms MS]");
  process.exit(2);
}

const t0 = Date.now();
const say = (msg: string) => console.log(`[bench:qstash +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

/** The receiver: each request's arrival by the id it carries (Upstash-Message-Id, or the BullMQ job's). */
async function startTarget() {
  const arrivals = new Map<string, number>();
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const id = req.headers["upstash-message-id"] ?? req.headers["x-bench-id"];
      if (typeof id === "string" && !arrivals.has(id)) arrivals.set(id, Date.now());
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, arrivals };
}

/** Calls `call(i)` for i in [0, count) with `inFlight` at once; what each call answered, by id, with when. */
async function drive(count: number, inFlight: number, call: (i: number) => Promise<string[]>) {
  const accepted = new Map<string, number>();
  const ms: number[] = [];
  let failed = 0;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = next++; i < count; i = next++) {
        const before = performance.now();
        try {
          for (const id of await call(i)) accepted.set(id, Date.now());
        } catch {
          failed++;
        }
        ms.push(performance.now() - before);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { accepted, failed, seconds, requestMs: summarize(ms) };
}

/** Waits until every accepted id arrived (or the settle window ends); lag = arrival − acceptance. */
async function lagsOf(accepted: Map<string, number>, arrivals: Map<string, number>) {
  const deadline = Date.now() + SETTLE_MS;
  while (Date.now() < deadline && [...accepted.keys()].some((id) => !arrivals.has(id))) await new Promise((r) => setTimeout(r, 100));
  const lags = [...accepted].flatMap(([id, at]) => (arrivals.has(id) ? [arrivals.get(id)! - at] : []));
  return { delivered: lags.length, lagMs: summarize(lags) };
}

type Row = Record<string, unknown>;

function figures(what: string, count: number, run: Awaited<ReturnType<typeof drive>>, lag: Awaited<ReturnType<typeof lagsOf>>): Row {
  return {
    what,
    messages: count,
    accepted: run.accepted.size,
    failed: run.failed,
    acceptedPerSecond: round(run.accepted.size / run.seconds),
    requestMsP50: round(run.requestMs.p50),
    requestMsP99: round(run.requestMs.p99),
    delivered: lag.delivered,
    lagMsP50: round(lag.lagMs.p50),
    lagMsP90: round(lag.lagMs.p90),
    lagMsP99: round(lag.lagMs.p99),
    lagMsMax: round(lag.lagMs.max),
  };
}

async function benchEdgecron(target: Awaited<ReturnType<typeof startTarget>>): Promise<Row[]> {
  let stack: Stack | undefined;
  try {
    stack = await startStack({ label: "bench:qstash" });
    say(`stack up at ${stack.base}`);
    const client = new Client({ baseUrl: stack.base, token: stack.token, retry: false });
    const url = `${target.base}/qstash`;
    const rows: Row[] = [];
    const single = await drive(N, C, async (i) => [(await client.publishJSON({ url, body: { i } })).messageId]);
    rows.push(figures(`edgecron /v2 publish (${C} in flight)`, N, single, await lagsOf(single.accepted, target.arrivals)));
    say(JSON.stringify(rows.at(-1)));
    const batches = Math.ceil(N / B);
    const batched = await drive(batches, BC, async (b) => {
      const items = Array.from({ length: Math.min(B, N - b * B) }, (_, k) => ({ url, body: { i: b * B + k } }));
      return (await client.batchJSON(items)).map((a) => (a as { messageId: string }).messageId);
    });
    rows.push(figures(`edgecron /v2 batch of ${B} (${BC} in flight)`, N, batched, await lagsOf(batched.accepted, target.arrivals)));
    say(JSON.stringify(rows.at(-1)));
    return rows;
  } finally {
    await stack?.stop();
  }
}

async function benchBullmq(target: Awaited<ReturnType<typeof startTarget>>): Promise<Row[]> {
  const binary = findRedisServer();
  if (!binary) {
    say("BullMQ skipped: redis-server is not installed");
    return [];
  }
  let redis: RedisServer | undefined;
  let queue: Queue | undefined;
  let worker: Worker | undefined;
  try {
    redis = await startRedis({ binary });
    const connection = { host: "127.0.0.1", port: redis.port };
    queue = new Queue("bench-qstash", { connection });
    worker = new Worker(
      "bench-qstash",
      async (job) => {
        const res = await fetch(`${target.base}/bullmq`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-bench-id": String(job.id) },
          body: JSON.stringify(job.data),
        });
        await res.arrayBuffer();
      },
      { connection, concurrency: 50 },
    );
    await worker.waitUntilReady();
    const rows: Row[] = [];
    const single = await drive(N, C, async (i) => [String((await queue!.add("m", { i }, { attempts: 4 })).id)]);
    rows.push(figures(`BullMQ add (${C} in flight)`, N, single, await lagsOf(single.accepted, target.arrivals)));
    say(JSON.stringify(rows.at(-1)));
    const batches = Math.ceil(N / B);
    const batched = await drive(batches, BC, async (b) => {
      const items = Array.from({ length: Math.min(B, N - b * B) }, (_, k) => ({
        name: "m",
        data: { i: b * B + k },
        opts: { attempts: 4 },
      }));
      return (await queue!.addBulk(items)).map((j) => String(j.id));
    });
    rows.push(figures(`BullMQ addBulk of ${B} (${BC} in flight)`, N, batched, await lagsOf(batched.accepted, target.arrivals)));
    say(JSON.stringify(rows.at(-1)));
    return rows;
  } finally {
    await worker?.close();
    await queue?.close();
    await redis?.stop();
  }
}

const target = await startTarget();
let code = 0;
try {
  const rows = [...(await benchEdgecron(target)), ...(await benchBullmq(target))];
  console.table(rows);
  console.log(JSON.stringify({ loadavg: loadavg().map((l) => round(l, 2)), rows }));
} catch (err) {
  console.error(err);
  code = 1;
} finally {
  target.server.close();
}
process.exit(code);
