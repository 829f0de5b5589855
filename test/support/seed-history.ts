import { runKeyRange } from "../../src/model/ids";

/**
 * A long history written straight into a shard, in bulk: `count` finished runs of one job
 * (every tenth `dead`, the rest `succeeded`), a minute apart, each with its one attempt on its
 * row, as the shard keeps a run's latest attempt. For the tests and benchmarks that show the
 * hot path does not read history. Their ids are the job's (`runKeyRange`), as a real run's are.
 */
export function seedHistory(sql: SqlStorage, jobId: string, count: number): void {
  sql.exec(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
     INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at, finished_at, status,
       a_number, a_fence, a_started_at, a_finished_at, a_outcome, a_status, a_token)
     SELECT ?3 || i, ?1, 1, 'schedule', i * 60000, CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'succeeded' END, 1, 1, NULL,
       i * 60000, i * 60000 + 5, i * 60000 + 50, CASE WHEN i % 10 = 0 THEN 503 ELSE 200 END,
       1, 1, i * 60000 + 5, i * 60000 + 50, CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN i % 10 = 0 THEN 503 ELSE 200 END, 'token' FROM n`,
    jobId,
    count,
    `${runKeyRange(jobId)[0]}h`,
  );
}
