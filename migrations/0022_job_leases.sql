-- A tenant's live jobs under its maxJobs are counted by its gate, which leases room to the
-- Worker's isolates; a job is inserted on a lease only while the lease is of the tenant's current
-- count (src/catalog/insert-jobs.ts). Each count by the gate bumps jobs_epoch in the same D1
-- transaction that counts, so the leases granted before it no longer insert: every job is in
-- that count or on a lease the gate granted since (src/gate/job-count.ts). A row written per
-- count, none per job created.
ALTER TABLE tenants ADD COLUMN jobs_epoch INTEGER NOT NULL DEFAULT 0;
