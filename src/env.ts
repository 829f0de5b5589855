/**
 * Kept for src/shard/shard.ts only, until it imports `gateStub` from ./stubs and uses the
 * global `Env` that `npm run types` generates (worker-configuration.d.ts).
 */
export type Env = Cloudflare.Env;
export { gateStub } from "./stubs";
