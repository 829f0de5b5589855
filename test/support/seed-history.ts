/**
 * A long history written straight into a shard, in bulk: `count` finished runs of one job
 * (every tenth `dead`, the rest `succeeded`), a minute apart, each with its one attempt. For
 * the tests and benchmarks that show the hot path does not read history.
 */
export function seedHistory(sql: SqlStorage, jobId: string, count: number, idPrefix = "run_history_"): void {
  sql.exec(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
     INSERT INTO runs (id, job_id, job_version, trigger, scheduled_at, state, attempt, fence, due_at, created_at, started_at, finished_at, status)
     SELECT ?3 || i, ?1, 1, 'schedule', i * 60000, CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'succeeded' END, 1, 1, NULL,
       i * 60000, i * 60000 + 5, i * 60000 + 50, CASE WHEN i % 10 = 0 THEN 503 ELSE 200 END FROM n`,
    jobId,
    count,
    idPrefix,
  );
  sql.exec(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
     INSERT INTO attempts (run_id, attempt, fence, started_at, finished_at, outcome, status, completion_token)
     SELECT ?2 || i, 1, 1, i * 60000 + 5, i * 60000 + 50, CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN i % 10 = 0 THEN 503 ELSE 200 END, 'token' FROM n`,
    count,
    idPrefix,
  );
}
