-- Tenants own jobs. API keys are stored only as SHA-256 hashes of the key.
CREATE TABLE tenants (
  id                  TEXT PRIMARY KEY,    -- ten_<random>, or 'default' (the admin token's own)
  name                TEXT,
  max_jobs            INTEGER,             -- null: no limit
  max_runs_in_flight  INTEGER,
  requests_per_second INTEGER,
  signing_generation  INTEGER NOT NULL DEFAULT 1, -- signing secrets are derived from it; rotation bumps it
  version             INTEGER NOT NULL DEFAULT 1, -- bumped on every change; shards apply only newer ones
  created_at          INTEGER NOT NULL
);

-- Jobs created with the admin token belong here; it has no limits.
INSERT INTO tenants (id, name, created_at) VALUES ('default', 'default', 0);

CREATE TABLE api_keys (
  id          TEXT PRIMARY KEY,            -- key_<random>: names a key without revealing it
  tenant_id   TEXT NOT NULL REFERENCES tenants (id),
  hash        TEXT NOT NULL UNIQUE,        -- hex SHA-256 of the whole key
  prefix      TEXT NOT NULL,               -- the key's first characters, to recognise it in a list
  created_at  INTEGER NOT NULL,
  revoked_at  INTEGER
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, id);

-- No REFERENCES here: SQLite (and so D1, which enforces foreign keys) cannot add a referencing
-- column with a default to a table that has rows. The API sets it from the caller's tenant.
ALTER TABLE jobs ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, id);
