import { guard } from "./d1";

/**
 * The sweep's place between cron invocations (migrations/0003_sweep_state.sql). Each invocation
 * reads it once and writes it once, so the sweep's cost does not grow with how often it ran.
 */
export interface SweepState {
  /** The change feed has compared every changed job (version > 1) up to this (updated_at, id). */
  changes: { at: number; id: string };
  /** The change feed has compared every job whose id is up to this one: new jobs, by id. */
  created: string;
  /**
   * The consistency pass: `shard` is "" when none is under way, the shard it is finishing
   * (tenants, alarm) while it goes through the shards, and PAST_SHARDS once it goes through the
   * jobs by id, `after` being the last id compared.
   */
  pass: { shard: string; after: string; startedAt: number | null; completed: number };
  /** No target stored in clear remains: the sealing pass has nothing left to look for. */
  targetsSealed: boolean;
  /**
   * The re-seal after an ENCRYPTION_KEYS rotation: the key every sealed target was found sealed
   * under (null: not yet), the last job id the round under way looked at, and how many jobs
   * still held a target under another key when a round last ended (null: none has).
   */
  reseal: { under: string | null; after: string; remaining: number | null };
  /** The audit retention: the last tenant whose expired entries are gone ("": a round begins). */
  auditAfter: string;
  /** The search for orphan QStash schedule jobs: the last job id it looked at ("": a round begins). */
  schedulesAfter: string;
  /** The last invocation that completed (null before one did): its start, its duration until this write, its repairs by kind. */
  last: SweepInvocation | null;
  /** Shards skipped because a call to them threw, summed over every invocation (one per shard per invocation). */
  shardFailures: number;
}

/**
 * What an invocation repairs, as GET /metrics names them: jobs handed back to a shard that
 * lacked their latest version, found by the change feed or by the consistency pass (a shard
 * call lost after its D1 write), and shards whose due work the pass ran itself because their
 * alarm had not (lost or late).
 */
export const SWEEP_REPAIR_KINDS = ["feed_job", "pass_job", "due_work"] as const;
export type SweepRepairKind = (typeof SWEEP_REPAIR_KINDS)[number];

export interface SweepInvocation {
  startedAt: number;
  durationMs: number;
  /** By kind; a row written by another release may hold kinds this one does not know, or lack some. */
  repairs: Record<string, number>;
  /** Shards it skipped because a call to them threw (0 in a row written before this was kept). */
  failedShards: number;
}

/** `pass.shard` once every shard is finished: no shard name ("shard-…") sorts after it. */
export const PAST_SHARDS = "~";

type Row = Record<string, unknown>;

export async function readSweepState(db: D1Database): Promise<SweepState> {
  const r = await guard("sweep state", () => db.prepare("SELECT * FROM sweep_state WHERE id = 1").first<Row>());
  if (!r) throw new Error("sweep_state is empty: are the D1 migrations applied?");
  return {
    changes: { at: r.changes_at as number, id: r.changes_id as string },
    created: r.created_after as string,
    pass: {
      shard: r.pass_shard as string,
      after: r.pass_after as string,
      startedAt: (r.pass_started_at as number | null) ?? null,
      completed: r.passes_completed as number,
    },
    targetsSealed: r.targets_sealed === 1,
    reseal: {
      under: (r.resealed_under as string | null) ?? null,
      after: (r.reseal_after as string | undefined) ?? "",
      remaining: (r.reseal_remaining as number | null) ?? null,
    },
    auditAfter: (r.audit_after as string | undefined) ?? "",
    schedulesAfter: (r.schedules_after as string | undefined) ?? "",
    last:
      (r.last_started_at ?? null) === null
        ? null
        : {
            startedAt: r.last_started_at as number,
            durationMs: r.last_duration_ms as number,
            repairs: JSON.parse(r.last_repairs as string) as Record<string, number>,
            failedShards: (r.last_failed_shards as number | null | undefined) ?? 0,
          },
    shardFailures: (r.shard_failures_total as number | undefined) ?? 0,
  };
}

export async function writeSweepState(db: D1Database, s: SweepState): Promise<void> {
  await guard("sweep state", () =>
    db
      .prepare(
        `UPDATE sweep_state SET changes_at = ?, changes_id = ?, created_after = ?, pass_shard = ?, pass_after = ?, pass_started_at = ?,
           passes_completed = ?, targets_sealed = ?, last_started_at = ?, last_duration_ms = ?, last_repairs = ?, audit_after = ?,
           resealed_under = ?, reseal_after = ?, reseal_remaining = ?, last_failed_shards = ?, shard_failures_total = ?,
           schedules_after = ? WHERE id = 1`,
      )
      .bind(
        s.changes.at,
        s.changes.id,
        s.created,
        s.pass.shard,
        s.pass.after,
        s.pass.startedAt,
        s.pass.completed,
        s.targetsSealed ? 1 : 0,
        s.last?.startedAt ?? null,
        s.last?.durationMs ?? null,
        s.last ? JSON.stringify(s.last.repairs) : null,
        s.auditAfter,
        s.reseal.under,
        s.reseal.after,
        s.reseal.remaining,
        s.last?.failedShards ?? null,
        s.shardFailures,
        s.schedulesAfter,
      )
      .run(),
  );
}
