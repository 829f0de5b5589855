-- The jobs of QStash schedules (src/app/qstash/schedules.ts names each `qstash schedule <id>`),
-- live ones only: the sweep walks them by id for jobs no schedule id names, which an upsert that
-- died between its steps left behind (src/reconcile/schedule-orphans.ts). Its cursor is
-- schedules_after, the last job id it looked at ('' as a round begins).
CREATE INDEX jobs_qstash_schedules ON jobs (id) WHERE name LIKE 'qstash schedule %' AND deleted_at IS NULL;
ALTER TABLE sweep_state ADD COLUMN schedules_after TEXT NOT NULL DEFAULT '';
