import { runKeyRange } from "../model/ids";

/** A chunk's row: when its runs' claim deadline comes, and which runs it holds. */
export interface ClaimChunk {
  dueAt: number;
  firstRun: string;
  runs: string[];
}

/**
 * Claim deadlines by chunk: the runs one transaction of the alarm dispatches together share
 * one claim deadline, a row of `claim_chunks` listing them, instead of an entry each in
 * `runs_due` (docs/cost.md, "Claim deadlines by chunk"). Such a run has no due time of its
 * own; when its chunk comes due, the alarm looks at each of its runs as at a due run (a
 * dispatch not claimed is sent again, which gives the run a due time of its own), then
 * deletes the row. Two rows (the insert and the delete) for up to FIRE_CHUNK runs, where each
 * run's `runs_due` entry is a row.
 */
export class ClaimChunks {
  /**
   * False once a read found no chunk, until the next add (a write that rolled back leaves it
   * set, which costs a statement, never a miss): the alarm asks for the earliest after every call.
   */
  private mayHoldAny = true;

  constructor(private readonly sql: Pick<SqlStorage, "exec">) {}

  add(dueAt: number, runIds: string[]): void {
    this.mayHoldAny = true;
    this.sql.exec("INSERT INTO claim_chunks (due_at, first_run, runs) VALUES (?, ?, ?)", dueAt, runIds[0]!, JSON.stringify(runIds));
  }

  due(now: number, limit: number): ClaimChunk[] {
    return this.sql.exec("SELECT * FROM claim_chunks WHERE due_at <= ? ORDER BY due_at LIMIT ?", now, limit).toArray().map(toChunk);
  }

  remove(chunk: ClaimChunk): void {
    this.sql.exec("DELETE FROM claim_chunks WHERE due_at = ? AND first_run = ?", chunk.dueAt, chunk.firstRun);
  }

  earliest(): number | null {
    if (!this.mayHoldAny) return null;
    const t = this.sql.exec("SELECT MIN(due_at) AS t FROM claim_chunks").one().t as number | null;
    this.mayHoldAny = t !== null;
    return t;
  }

  /**
   * The job's runs among the chunks not yet due (a pause, a delete or a new overlap policy
   * looks for them): every chunk is read, which is work in hand, never history, since a chunk
   * is deleted when its claim timeout ends.
   */
  runsOf(jobId: string): string[] {
    if (!this.mayHoldAny) return [];
    const [from, to] = runKeyRange(jobId);
    return this.sql
      .exec("SELECT * FROM claim_chunks")
      .toArray()
      .flatMap((r) => toChunk(r).runs.filter((id) => id > from && id < to));
  }
}

const toChunk = (r: Record<string, SqlStorageValue>): ClaimChunk => ({
  dueAt: r.due_at as number,
  firstRun: r.first_run as string,
  runs: JSON.parse(r.runs as string) as string[],
});
