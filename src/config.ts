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
}

const DEFAULT_CLAIM_TIMEOUT_MS = 60_000;

const positiveInteger = z
  .string({ error: (issue) => (issue.input === undefined ? "is not set; it must be a positive integer" : "must be a string") })
  .regex(/^[1-9][0-9]{0,14}$/, "must be a positive integer")
  .transform(Number);

/** An optional var may be absent or empty (wrangler.toml lists every var, empty when unset). */
const optional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === "" ? undefined : value), schema.optional()) as unknown as z.ZodOptional<T>;

const VarsSchema = z.object({
  SHARD_COUNT: positiveInteger,
  CLAIM_TIMEOUT_MS: optional(positiveInteger),
  PUBLIC_URL: optional(z.url({ protocol: /^https?$/, error: "must be an http or https URL" })),
  ALLOW_PRIVATE_TARGETS: optional(z.enum(["true", "false"], 'must be "true" or "false"')),
});

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
  };
  const key = JSON.stringify(vars);
  let found = parsed.get(key);
  if (!found) {
    found = parseConfig(vars);
    parsed.set(key, found);
  }
  return found;
}

export function parseConfig(vars: Partial<Record<keyof typeof VarsSchema.shape, string>>): Config {
  const result = VarsSchema.safeParse(vars);
  if (!result.success) {
    throw new Misconfigured(result.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; "));
  }
  const v = result.data;
  return Object.freeze({
    shardCount: v.SHARD_COUNT,
    claimTimeoutMs: v.CLAIM_TIMEOUT_MS ?? DEFAULT_CLAIM_TIMEOUT_MS,
    publicUrl: v.PUBLIC_URL,
    allowPrivateTargets: v.ALLOW_PRIVATE_TARGETS === "true",
  });
}
