import type { Job } from "edgecron/client";
import { UsageError } from "../exit.ts";
import { CHAIN_FIELDS, type ChainField } from "./fields.ts";
import type { DeclaredJob } from "./file.ts";

/**
 * A job's chains to set once every job of the file exists: a job created by this apply has no
 * id before, so chains are set last, by name; the command turns the names into ids then.
 * `set` holds each field that changes: the names, or null to take the chain away.
 */
export interface ChainChange {
  action: "chain";
  name: string;
  /** null: the job is created by this apply. */
  id: string | null;
  set: Partial<Record<ChainField, string[] | null>>;
  fields: Array<{ field: ChainField; from: string[] | null; to: string[] | null }>;
}

/**
 * The chain changes of a plan. A file names chained jobs by name: a job of the file, or one of
 * the tenant's (unless `prune` deletes it). A chain the file leaves out is taken away, as any
 * field left out goes back to its default; an id the API shows that no job's name stands for is
 * shown as the id.
 */
export function planChains(declared: DeclaredJob[], current: Job[], options: { prune: boolean }): ChainChange[] {
  const currentByName = new Map(current.flatMap((j) => (j.name === null ? [] : [[j.name, j] as const])));
  const seen = new Set<string>();
  const twice = new Set<string>();
  for (const { name } of current) if (name !== null) (seen.has(name) ? twice : seen).add(name);
  const nameOf = new Map(current.map((j) => [j.id, j.name ?? j.id]));
  const known = new Set([...declared.map((d) => d.name), ...(options.prune ? [] : currentByName.keys())]);
  const changes: ChainChange[] = [];
  for (const want of declared) {
    const have = currentByName.get(want.name);
    const change: ChainChange = { action: "chain", name: want.name, id: have?.id ?? null, set: {}, fields: [] };
    for (const field of CHAIN_FIELDS) {
      const to = want[field]?.length ? want[field]! : null;
      for (const name of to ?? []) {
        if (!known.has(name)) {
          throw new UsageError(`${want.name}: ${field} names "${name}", which is neither a job of the file nor one of the tenant's`);
        }
        if (twice.has(name)) throw new UsageError(`${want.name}: ${field} names "${name}", which two of the tenant's jobs are called`);
      }
      const from = have?.[field]?.length ? have[field]!.map((id) => nameOf.get(id) ?? id) : null;
      if (sameNames(from, to)) continue;
      change.set[field] = to;
      change.fields.push({ field, from, to });
    }
    if (change.fields.length > 0) changes.push(change);
  }
  return changes;
}

const sameNames = (a: string[] | null, b: string[] | null) => JSON.stringify(a && [...a].sort()) === JSON.stringify(b && [...b].sort());

/** A job as POST /v1/jobs takes it from the file: its chains are set afterwards (planChains). */
export function withoutChains<T extends Partial<Record<ChainField, unknown>>>(job: T): Omit<T, ChainField> {
  const { onSuccess: _s, onFailure: _f, ...rest } = job;
  return rest;
}
