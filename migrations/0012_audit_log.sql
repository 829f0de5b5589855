-- Every change made through the API: who (a key id or the admin token, never a secret), when,
-- what, from where, and the change itself with secrets redacted. Written in the same D1 batch as
-- the change it records where the change is a D1 write (src/catalog/audit.ts).
CREATE TABLE audit_log (
  tenant_id  TEXT NOT NULL,      -- whose object changed
  id         TEXT NOT NULL,      -- aud_<instant base 36><random>: sorts by time
  at         INTEGER NOT NULL,   -- epoch ms
  actor      TEXT NOT NULL,      -- key_<id>, "admin" or "admin:next" (the admin token being rotated in)
  action     TEXT NOT NULL,      -- job.create, job.patch, key.revoke, … (docs/security.md)
  subject    TEXT NOT NULL,      -- the id of what changed
  client     TEXT,               -- the client's address (CF-Connecting-IP), when known
  change     TEXT NOT NULL,      -- JSON { before, after }, secrets redacted
  -- A tenant's entries in time order, and no other index: an entry costs one row written
  -- (docs/cost.md). The admin token's view of every tenant at once scans the table.
  PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
