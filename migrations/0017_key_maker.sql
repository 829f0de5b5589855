-- The key that made a key: revoking a key revokes the keys it made, and theirs
-- (src/catalog/tenants.ts), so a leaked admin key cannot mint keys that outlive it. NULL: made by
-- the admin token or with its tenant, and every key made before this migration (its maker was not
-- recorded; the audit log's key.create entry names it). A reference with no default is one SQLite
-- can add to a table that has rows.
ALTER TABLE api_keys ADD COLUMN created_by TEXT REFERENCES api_keys (id);
-- The revocation walks from a key to the keys it made: a seek per key, not a scan of every key.
CREATE INDEX api_keys_by_maker ON api_keys (created_by) WHERE created_by IS NOT NULL;
