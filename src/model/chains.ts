import type { JobSpec } from "./job";

/**
 * The job prefix a chain was set with (docs/security.md, "A job prefix"): a key limited to a prefix may chain only to
 * jobs under it, when it sets the chain (src/app/chains.ts, 403) and when the chain fires (the
 * consumer, src/consumer/outbox.ts): each chain records the prefix of the key that set it, in the
 * job's spec (`chainPrefixes`), and a chained job is triggered only while its name is under it.
 */

export type ChainField = "onSuccess" | "onFailure";
export const CHAIN_FIELDS: readonly ChainField[] = ["onSuccess", "onFailure"];

/**
 * Who sets chains: the job prefix of the caller's key (null: none), and the fields it sets now.
 * A chain it did not set now (the other field, kept by a PATCH) is not its to answer for.
 */
export interface ChainSetter {
  jobPrefix: string | null;
  fields: readonly ChainField[];
}

/**
 * `spec` with the prefixes of the chains set now (`setter.fields`) recorded: the setter's job
 * prefix, or none; a chain taken away takes its prefix with it. The others are kept as they were.
 */
export function recordChainPrefixes(spec: JobSpec, setter: ChainSetter): JobSpec {
  const prefixes = { ...spec.chainPrefixes };
  for (const field of setter.fields) {
    if (setter.jobPrefix !== null && spec[field]?.length) prefixes[field] = setter.jobPrefix;
    else delete prefixes[field];
  }
  const { chainPrefixes: _, ...rest } = spec;
  return Object.keys(prefixes).length > 0 ? { ...rest, chainPrefixes: prefixes } : rest;
}

/**
 * Whether a run of `source` that ended may trigger `chained` (the consumer asks, src/consumer/outbox.ts):
 * each chain of the source that names it, set by a key limited to a prefix, holds it to that
 * prefix as its name is now. So a chain set by a prefixed key never fires a job outside the
 * prefix, even one renamed out of it since. A source gone from the catalog has no chain to
 * answer for it: nothing is triggered.
 */
export function chainMayFire(source: { spec: JobSpec } | undefined, chained: { id: string; name: string | null }): boolean {
  if (!source) return false;
  return CHAIN_FIELDS.every((field) => {
    const prefix = source.spec.chainPrefixes?.[field];
    return prefix === undefined || !source.spec[field]?.includes(chained.id) || (chained.name?.startsWith(prefix) ?? false);
  });
}
