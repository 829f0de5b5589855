-- A tenant's default notifications (JSON { url, on }) for its jobs that name none of their own;
-- NULL: none. Carried to shards with the tenant's other settings.
ALTER TABLE tenants ADD COLUMN notify TEXT;
