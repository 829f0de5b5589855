import { applyD1Migrations, env } from "cloudflare:test";

// Storage is isolated per test file; each file starts from the migrated catalog.
await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
