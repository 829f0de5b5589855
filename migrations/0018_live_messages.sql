-- How many QStash messages a tenant may have live at once (published, not yet delivered, dead or
-- cancelled); null: no limit. Messages are held by their shards alone, with no catalog row, so
-- the tenant's gate counts them (docs/qstash.md, "Messages have a quota"). Tenants from before
-- get the default a new tenant gets; the default tenant (the admin token's) has no limits, as it
-- has none of the others.
ALTER TABLE tenants ADD COLUMN max_live_messages INTEGER;
UPDATE tenants SET max_live_messages = 10000 WHERE id != 'default';
