-- How many days a tenant's finished runs stay in their shards before the archive; null: the
-- default (7), and a job's own retention wins over either.
ALTER TABLE tenants ADD COLUMN retention_days INTEGER;
