-- What a key may do: comma-separated scopes of read, write, admin (each includes the ones before
-- it), optionally only for jobs whose name starts with job_prefix. Keys made before scopes existed
-- acted as their whole tenant: they keep every scope, so no client is locked out by the upgrade
-- (docs/security.md says how to replace them with narrower ones).
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT 'read,write,admin';
ALTER TABLE api_keys ADD COLUMN job_prefix TEXT;
