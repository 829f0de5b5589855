-- Where the sweep's audit retention stands between invocations: the last tenant whose expired
-- audit entries it archived and removed ('' at the start of a round; src/reconcile/audit-retention.ts).
ALTER TABLE sweep_state ADD COLUMN audit_after TEXT NOT NULL DEFAULT '';
