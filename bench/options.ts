/** The bench's command-line options; each can also come from its environment variable. */

const WORKLOADS = ["burst", "steady"] as const;
export type Workload = (typeof WORKLOADS)[number];
/** none: edgecron alone; bullmq: BullMQ instead of edgecron; both: edgecron, then BullMQ. */
const PEERS = ["none", "bullmq", "both"] as const;
export type Peer = (typeof PEERS)[number];
/** bullmq-aof: BullMQ on a Redis that appends every write to its AOF and fsyncs it every second. */
export type System = "edgecron" | "bullmq" | "bullmq-aof";
/** Which Redis the BullMQ peer runs on: in memory only, with `appendfsync everysec`, or one after the other. */
const REDIS_AOF = ["no", "everysec", "both"] as const;
export type RedisAof = (typeof REDIS_AOF)[number];
/** Whose jobs edgecron's are: a tenant's made through the API with the default limits, or the admin token's. */
const CALLERS = ["tenant", "admin"] as const;
export type Caller = (typeof CALLERS)[number];
/** How edgecron's two Workers run locally (scripts/dev-topology.ts): two `wrangler dev` processes, or one. */
const TOPOLOGIES = ["two", "one"] as const;
export type Topology = (typeof TOPOLOGIES)[number];

export interface Options {
  workload: Workload;
  peer: Peer;
  topology: Topology;
  jobs: number;
  schedules: number;
  "duration-s": number;
  concurrency: number;
  calibration: number;
  "margin-ms": number;
  safety: number;
  "timeout-ms": number;
  "settle-ms": number;
  sample: number;
  "startup-timeout-ms": number;
  as: Caller;
  "tenant-max-in-flight": number;
  "tenant-max-jobs": number;
  warmup: number;
  "redis-aof": RedisAof;
  "bullmq-workers": number;
  "bullmq-concurrency": number;
  "in-place": boolean;
  "keep-state": boolean;
  profile: boolean;
}

interface Spec {
  env: string;
  default: number | boolean | string;
  help: string;
  /** A factor (≥ 1) rather than a whole number. */
  float?: boolean;
  /** Takes no value: present is true. */
  flag?: boolean;
  /** Takes one of these words rather than a number. */
  choices?: readonly string[];
}

const OPTIONS: Record<keyof Options, Spec> = {
  workload: { env: "BENCH_WORKLOAD", default: "burst", help: "burst (one-off jobs due at one instant) or steady", choices: WORKLOADS },
  peer: {
    env: "BENCH_PEER",
    default: "none",
    help: "none: edgecron; bullmq: BullMQ + Redis instead; both: edgecron, then BullMQ",
    choices: PEERS,
  },
  topology: {
    env: "BENCH_TOPOLOGY",
    default: "two",
    help: "edgecron: two (the runner Worker as a second wrangler dev, as npm start runs it) or one (both Workers in one)",
    choices: TOPOLOGIES,
  },
  jobs: { env: "BENCH_JOBS", default: 10_000, help: "burst: N, the number of jobs" },
  schedules: { env: "BENCH_SCHEDULES", default: 1_000, help: "steady: S, the number of every-second schedules" },
  "duration-s": { env: "BENCH_DURATION_S", default: 30, help: "steady: D, the seconds each schedule fires" },
  concurrency: { env: "BENCH_CONCURRENCY", default: 32, help: "create requests in flight" },
  calibration: {
    env: "BENCH_CALIBRATION",
    default: 200,
    help: "jobs created first (due in 7 days, deleted once measured) to measure the creation rate",
  },
  warmup: {
    env: "BENCH_WARMUP",
    default: 200,
    help: "one-off jobs created, fired and received (then deleted) before the calibration, on every system alike",
  },
  "margin-ms": { env: "BENCH_MARGIN_MS", default: 5_000, help: "added to the estimated end of creation to make T" },
  safety: { env: "BENCH_SAFETY", default: 1.2, help: "factor on the estimated creation time", float: true },
  "timeout-ms": {
    env: "BENCH_TIMEOUT_MS",
    default: 300_000,
    help: "how long after T (steady: after the last second) to wait for receipts",
  },
  "settle-ms": { env: "BENCH_SETTLE_MS", default: 10_000, help: "extra listening after everything arrived, for duplicates" },
  sample: { env: "BENCH_SAMPLE", default: 50, help: "edgecron burst: jobs whose runs are read back through the runs API" },
  "startup-timeout-ms": { env: "BENCH_STARTUP_TIMEOUT_MS", default: 180_000, help: "how long to wait for /healthz" },
  as: {
    env: "BENCH_AS",
    default: "tenant",
    help: "edgecron: tenant (the jobs of a tenant made through the API, its own key, default limits) or admin (the admin token's, no limits)",
    choices: CALLERS,
  },
  "tenant-max-in-flight": {
    env: "BENCH_TENANT_MAX_IN_FLIGHT",
    default: 0,
    help: "edgecron tenant: its maxRunsInFlight instead of the default (0: the default)",
  },
  "tenant-max-jobs": {
    env: "BENCH_TENANT_MAX_JOBS",
    default: 0,
    help: "edgecron tenant: its maxJobs instead of the default (0: the default), for a burst the default cannot hold",
  },
  "redis-aof": {
    env: "BENCH_REDIS_AOF",
    default: "both",
    help: "bullmq: Redis without persistence (no), with appendonly + appendfsync everysec (everysec), or each in turn (both)",
    choices: REDIS_AOF,
  },
  "bullmq-workers": { env: "BENCH_BULLMQ_WORKERS", default: 2, help: "bullmq: worker processes (one Worker each)" },
  "bullmq-concurrency": {
    env: "BENCH_BULLMQ_CONCURRENCY",
    default: 0,
    help: "bullmq: jobs each worker process runs at once (0: edgecron's calls in flight shared among the workers)",
  },
  "in-place": {
    env: "BENCH_IN_PLACE",
    default: false,
    help: "edgecron: run the stack from the working tree, not from a snapshot of it",
    flag: true,
  },
  profile: {
    env: "BENCH_PROFILE",
    default: false,
    help: "edgecron: sample the Worker's CPU from half a second before T to the end of the wait, by part (slows the run: lags not comparable)",
    flag: true,
  },
  "keep-state": {
    env: "BENCH_KEEP_STATE",
    default: false,
    help: "keep the temporary dir (edgecron: D1 + shard state, snapshot; bullmq: redis log) afterwards",
    flag: true,
  },
};

/** A bad command line: exit status 2 with the usage. */
export class UsageError extends Error {}

const isOption = (name: string): name is keyof Options => Object.hasOwn(OPTIONS, name);
const truthy = (text: string) => text !== "0" && text !== "false";

export function usage(): string {
  const lines = Object.entries(OPTIONS).map(([name, o]) => {
    const value = o.flag ? "" : o.choices ? ` <${o.choices.join("|")}>` : " <n>";
    return `${`  --${name}${value}`.padEnd(36)} ${o.help} (env ${o.env}, default ${o.default})`;
  });
  return `usage: npm run bench -- [options]\n${lines.join("\n")}`;
}

/** The value of a non-flag option as written: a word for a choice, a number otherwise. */
const parseValue = (o: Spec, raw: string): number | string => (o.choices ? raw : Number(raw));

/** The options from the environment, then the command line; null when help was asked for. */
export function parseOptions(argv: readonly string[], environment: NodeJS.ProcessEnv = process.env): Options | null {
  const values: Record<string, number | boolean | string> = {};
  for (const [name, o] of Object.entries(OPTIONS)) {
    const env = environment[o.env];
    values[name] = env !== undefined && env !== "" ? (o.flag ? truthy(env) : parseValue(o, env)) : o.default;
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") return null;
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    const name = match?.[1];
    if (!match || name === undefined || !isOption(name)) throw new UsageError(`unknown argument: ${arg}`);
    if (OPTIONS[name].flag) values[name] = match[2] === undefined ? true : truthy(match[2]);
    else {
      i += match[2] === undefined ? 1 : 0;
      const raw = match[2] ?? argv[i];
      if (raw === undefined) throw new UsageError(`--${name} needs a value`);
      values[name] = parseValue(OPTIONS[name], raw);
    }
  }
  for (const [name, o] of Object.entries(OPTIONS)) {
    if (o.flag) continue;
    const v = values[name];
    if (o.choices) {
      if (typeof v !== "string" || !o.choices.includes(v)) throw new UsageError(`--${name}: must be one of ${o.choices.join(", ")}: ${v}`);
      continue;
    }
    const ok = typeof v === "number" && (o.float ? Number.isFinite(v) && v >= 1 : Number.isInteger(v) && v >= 0);
    if (!ok) throw new UsageError(`--${name}: not a valid value: ${v}`);
  }
  const options = values as unknown as Options;
  for (const name of ["jobs", "schedules", "duration-s", "concurrency", "bullmq-workers"] as const) {
    if (options[name] < 1) throw new UsageError(`--${name} must be at least 1`);
  }
  return options;
}

/** The systems a run measures, in the order it measures them. */
export function systemsOf(options: Pick<Options, "peer" | "redis-aof">): System[] {
  const bullmq: System[] = { no: ["bullmq"], everysec: ["bullmq-aof"], both: ["bullmq", "bullmq-aof"] }[options["redis-aof"]] as System[];
  return options.peer === "none" ? ["edgecron"] : options.peer === "bullmq" ? bullmq : ["edgecron", ...bullmq];
}

/**
 * Each BullMQ worker process's concurrency: as given, or edgecron's calls in flight shared
 * among the worker processes (rounded up, so never fewer in all).
 */
export const bullmqConcurrency = (options: Pick<Options, "bullmq-concurrency" | "bullmq-workers">, edgecronInFlight: number) =>
  options["bullmq-concurrency"] > 0 ? options["bullmq-concurrency"] : Math.ceil(edgecronInFlight / options["bullmq-workers"]);
