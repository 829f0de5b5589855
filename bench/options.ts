/** The bench's command-line options; each can also come from its environment variable. */

export interface Options {
  jobs: number;
  concurrency: number;
  calibration: number;
  "margin-ms": number;
  safety: number;
  "timeout-ms": number;
  "settle-ms": number;
  sample: number;
  "startup-timeout-ms": number;
  "tenant-max-in-flight": number;
  "in-place": boolean;
  "keep-state": boolean;
}

interface Spec {
  env: string;
  default: number | boolean;
  help: string;
  /** A factor (≥ 1) rather than a whole number. */
  float?: boolean;
  /** Takes no value: present is true. */
  flag?: boolean;
}

const OPTIONS: Record<keyof Options, Spec> = {
  jobs: { env: "BENCH_JOBS", default: 10_000, help: "N, the number of burst jobs" },
  concurrency: { env: "BENCH_CONCURRENCY", default: 32, help: "create requests in flight" },
  calibration: { env: "BENCH_CALIBRATION", default: 200, help: "jobs created first (due in 7 days) to measure the creation rate" },
  "margin-ms": { env: "BENCH_MARGIN_MS", default: 5_000, help: "added to the estimated end of creation to make T" },
  safety: { env: "BENCH_SAFETY", default: 1.2, help: "factor on the estimated creation time", float: true },
  "timeout-ms": { env: "BENCH_TIMEOUT_MS", default: 300_000, help: "how long after T to wait for receipts" },
  "settle-ms": { env: "BENCH_SETTLE_MS", default: 10_000, help: "extra listening after the last job arrived, for duplicates" },
  sample: { env: "BENCH_SAMPLE", default: 50, help: "jobs whose runs are read back through the runs API" },
  "startup-timeout-ms": { env: "BENCH_STARTUP_TIMEOUT_MS", default: 180_000, help: "how long to wait for /healthz" },
  "tenant-max-in-flight": {
    env: "BENCH_TENANT_MAX_IN_FLIGHT",
    default: 0,
    help: "create the jobs as a tenant with this maxRunsInFlight (0: with the admin token, no limits)",
  },
  "in-place": { env: "BENCH_IN_PLACE", default: false, help: "run the stack from the working tree, not from a snapshot of it", flag: true },
  "keep-state": {
    env: "BENCH_KEEP_STATE",
    default: false,
    help: "keep the temporary dir (D1 + shard state, snapshot) afterwards",
    flag: true,
  },
};

/** A bad command line: exit status 2 with the usage. */
export class UsageError extends Error {}

const isOption = (name: string): name is keyof Options => Object.hasOwn(OPTIONS, name);
const truthy = (text: string) => text !== "0" && text !== "false";

export function usage(): string {
  const lines = Object.entries(OPTIONS).map(
    ([name, o]) => `${`  --${name}${o.flag ? "" : " <n>"}`.padEnd(27)} ${o.help} (env ${o.env}, default ${o.default})`,
  );
  return `usage: npm run bench -- [options]\n${lines.join("\n")}`;
}

/** The options from the environment, then the command line; null when help was asked for. */
export function parseOptions(argv: readonly string[], environment: NodeJS.ProcessEnv = process.env): Options | null {
  const values: Record<string, number | boolean> = {};
  for (const [name, o] of Object.entries(OPTIONS)) {
    const env = environment[o.env];
    values[name] = env !== undefined && env !== "" ? (o.flag ? truthy(env) : Number(env)) : o.default;
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
      values[name] = Number(raw);
    }
  }
  for (const [name, o] of Object.entries(OPTIONS)) {
    if (o.flag) continue;
    const v = values[name] as number;
    const ok = o.float ? Number.isFinite(v) && v >= 1 : Number.isInteger(v) && v >= 0;
    if (!ok) throw new UsageError(`--${name}: not a valid value: ${v}`);
  }
  const options = values as unknown as Options;
  if (options.jobs < 1) throw new UsageError("--jobs must be at least 1");
  if (options.concurrency < 1) throw new UsageError("--concurrency must be at least 1");
  return options;
}
