import type { D1Migration } from "cloudflare:test";

/** Bindings only the test projects add (vitest.config.ts); the Worker's own are generated. */
declare global {
  namespace Cloudflare {
    interface Env {
      TEST_MIGRATIONS: D1Migration[];
      RECEIVER_URL: string;
      BENCH_HISTORY_RUNS: string;
    }
  }
}
