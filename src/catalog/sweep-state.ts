import { guard } from "./d1";

/**
 * The sweep's place between cron invocations (migrations/0003_sweep_state.sql). Each invocation
 * reads it once and writes it once, so the sweep's cost does not grow with how often it ran.
 */
export interface SweepState {
  /** The change feed has compared every row up to this (updated_at, id). */
  changes: { at: number; id: string };
  /** The consistency pass: the shard it is in ("" before the first) and the last job id compared there. */
  pass: { shard: string; after: string; startedAt: number | null; completed: number };
  /** No target stored in clear remains: the sealing pass has nothing left to look for. */
  targetsSealed: boolean;
}

type Row = Record<string, unknown>;

export async function readSweepState(db: D1Database): Promise<SweepState> {
  const r = await guard("sweep state", () => db.prepare("SELECT * FROM sweep_state WHERE id = 1").first<Row>());
  if (!r) throw new Error("sweep_state is empty: are the D1 migrations applied?");
  return {
    changes: { at: r.changes_at as number, id: r.changes_id as string },
    pass: {
      shard: r.pass_shard as string,
      after: r.pass_after as string,
      startedAt: (r.pass_started_at as number | null) ?? null,
      completed: r.passes_completed as number,
    },
    targetsSealed: r.targets_sealed === 1,
  };
}

export async function writeSweepState(db: D1Database, s: SweepState): Promise<void> {
  await guard("sweep state", () =>
    db
      .prepare(
        `UPDATE sweep_state SET changes_at = ?, changes_id = ?, pass_shard = ?, pass_after = ?, pass_started_at = ?,
           passes_completed = ?, targets_sealed = ? WHERE id = 1`,
      )
      .bind(s.changes.at, s.changes.id, s.pass.shard, s.pass.after, s.pass.startedAt, s.pass.completed, s.targetsSealed ? 1 : 0)
      .run(),
  );
}
