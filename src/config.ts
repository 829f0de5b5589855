import { z } from "zod";

/** A required secret or setting is missing or malformed: the operator's to fix, not the client's. */
export class Misconfigured extends Error {}

/** The Worker's plain settings (wrangler.toml [vars]), parsed. Secrets are parsed where they are used (src/security). */
export interface Config {
  /** Jobs are spread over this many shards; a job records its shard, so raising it moves none. */
  readonly shardCount: number;
  /** How long a dispatched run may wait for a consumer before its shard sends it again. */
  readonly claimTimeoutMs: number;
  /** This Worker's public base URL, when known: targets then get X-Edgecron-Complete-Url. */
  readonly publicUrl: string | undefined;
  /** Targets may be loopback or private addresses: local development only. */
  readonly allowPrivateTargets: boolean;
  /**
   * The dispatch queues' bindings, each bound to a queue; their order numbers them for the
   * shard → queue mapping (src/model/dispatch-queue.ts).
   */
  readonly dispatchQueues: readonly string[];
}

const DEFAULT_CLAIM_TIMEOUT_MS = 60_000;

const positiveInteger = z
  .string({ error: (issue) => (issue.input === undefined ? "is not set; it must be a positive integer" : "must be a string") })
  .regex(/^[1-9][0-9]{0,14}$/, "must be a positive integer")
  .transform(Number);

/** An optional var may be absent or empty (wrangler.toml lists every var, empty when unset). */
const optional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === "" ? undefined : value), schema.optional()) as unknown as z.ZodOptional<T>;

/** Without DISPATCH_QUEUES, the one queue a deployment had before there were several. */
const DEFAULT_DISPATCH_QUEUES = ["RUNS"];

/** DISPATCH_QUEUES' binding names: comma-separated; empty or unset is the default (a non-string is refused by the schema). */
function listedQueues(value: unknown): string[] {
  return typeof value === "string" && value !== "" ? value.split(",").map((name) => name.trim()) : DEFAULT_DISPATCH_QUEUES;
}

/**
 * DISPATCH_QUEUES, checked against the Worker's bindings: a name that is not a queue would
 * otherwise only fail at a shard's first send to it, in a log line.
 */
const dispatchQueues = (isQueue: (binding: string) => boolean) =>
  z
    .string("must be a string")
    .optional()
    .transform((value, ctx) => {
      const names = listedQueues(value);
      const fail = (message: string) => ctx.addIssue({ code: "custom", message });
      const malformed = names.filter((name) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name));
      const repeated = names.filter((name, i) => names.indexOf(name) !== i);
      const unbound = names.filter((name) => !malformed.includes(name) && !isQueue(name));
      if (malformed.length > 0) fail(`must name queue bindings separated by commas, as "RUNS,RUNS_1"; got ${JSON.stringify(value)}`);
      // A name listed twice would give its queue twice the shards: surely a slip.
      else if (repeated.length > 0) fail(`names ${[...new Set(repeated)].join(", ")} more than once`);
      else if (unbound.length > 0) {
        fail(
          `${unbound.join(", ")} ${unbound.length === 1 ? "is not a queue" : "are not queues"} bound to this Worker ([[queues.producers]] in wrangler.toml)`,
        );
      }
      return names;
    });

const varsSchema = (isQueue: (binding: string) => boolean) =>
  z.object({
    SHARD_COUNT: positiveInteger,
    CLAIM_TIMEOUT_MS: optional(positiveInteger),
    PUBLIC_URL: optional(z.url({ protocol: /^https?$/, error: "must be an http or https URL" })),
    ALLOW_PRIVATE_TARGETS: optional(z.enum(["true", "false"], 'must be "true" or "false"')),
    DISPATCH_QUEUES: dispatchQueues(isQueue),
  });

type VarName = keyof ReturnType<typeof varsSchema>["shape"];

/** What a queue binding has: the producer's two calls (the runtime gives no type to test). */
function isQueueBinding(value: unknown): boolean {
  const queue = value as Partial<Queue> | null | undefined;
  return typeof queue?.send === "function" && typeof queue.sendBatch === "function";
}

/** Parsed settings by the vars' raw values: one entry per deployment's settings, in practice one. */
const parsed = new Map<string, Config>();

/**
 * The settings of this environment, checked once per distinct set of values (an env object may
 * be wrapped per request, e.g. by the cost meter, so the values are the key, not the object).
 * Throws Misconfigured naming each bad variable; the API answers that with a 500 that says so,
 * rather than scheduling with a wrong value.
 */
export function config(env: Env): Config {
  const vars = {
    SHARD_COUNT: env.SHARD_COUNT,
    CLAIM_TIMEOUT_MS: env.CLAIM_TIMEOUT_MS,
    PUBLIC_URL: env.PUBLIC_URL,
    ALLOW_PRIVATE_TARGETS: env.ALLOW_PRIVATE_TARGETS,
    // Optional: wrangler.toml files from before there were several dispatch queues lack it.
    DISPATCH_QUEUES: (env as Partial<Env>).DISPATCH_QUEUES,
  };
  const isQueue = (binding: string) => isQueueBinding((env as unknown as Record<string, unknown>)[binding]);
  // Which of the listed queues are bound is part of the key: the same vars may come without one.
  const key = JSON.stringify([vars, listedQueues(vars.DISPATCH_QUEUES).map(isQueue)]);
  let found = parsed.get(key);
  if (!found) {
    found = parseConfig(vars, isQueue);
    parsed.set(key, found);
  }
  return found;
}

/** `isQueue` says whether the Worker has a queue bound under that name. */
export function parseConfig(vars: Partial<Record<VarName, string>>, isQueue: (binding: string) => boolean): Config {
  const result = varsSchema(isQueue).safeParse(vars);
  if (!result.success) {
    throw new Misconfigured(result.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; "));
  }
  const v = result.data;
  return Object.freeze({
    shardCount: v.SHARD_COUNT,
    claimTimeoutMs: v.CLAIM_TIMEOUT_MS ?? DEFAULT_CLAIM_TIMEOUT_MS,
    publicUrl: v.PUBLIC_URL,
    allowPrivateTargets: v.ALLOW_PRIVATE_TARGETS === "true",
    dispatchQueues: Object.freeze(v.DISPATCH_QUEUES),
  });
}

/** Shortest admin token taken: it is compared whole, so its length is all that stands against guessing it. */
export const MIN_ADMIN_TOKEN_LENGTH = 32;

/**
 * The admin tokens: API_TOKEN, and API_TOKEN_NEXT while one is rotated in (optional, so not in
 * the generated Env; empty counts as unset). Throws Misconfigured naming a token that is too
 * short (never its value): a short one would be accepted as it is, and guessed.
 */
export function adminTokens(env: Env): { current: string; next: string | undefined } {
  const { API_TOKEN: current, API_TOKEN_NEXT: next } = env as Env & { API_TOKEN_NEXT?: string };
  for (const [name, value] of [
    ["API_TOKEN", current],
    ["API_TOKEN_NEXT", next],
  ] as const) {
    if (name === "API_TOKEN_NEXT" && !value) continue;
    if (typeof value !== "string" || value.length < MIN_ADMIN_TOKEN_LENGTH) {
      throw new Misconfigured(`${name}: must be at least ${MIN_ADMIN_TOKEN_LENGTH} characters long (it is the admin token)`);
    }
  }
  return { current, next: next || undefined };
}
