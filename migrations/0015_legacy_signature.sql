-- Whether a tenant's requests also carry the first signature scheme (Edgecron-Signature) beside
-- Edgecron-Signature-V2, for a deprecation period: on (1) for the tenants that existed before
-- V2, whose targets verify the first scheme; a tenant created since starts with it off (the
-- API inserts 0). Carried to shards with the tenant's other settings.
ALTER TABLE tenants ADD COLUMN legacy_signature INTEGER NOT NULL DEFAULT 1;
