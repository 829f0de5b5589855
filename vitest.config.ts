import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

/**
 * Two layers:
 * - `workers`: pure unit tests and integration tests inside workerd, against miniflare's real
 *   D1, Durable Objects (with alarms) and Queues, configured from wrangler.toml;
 * - `e2e`: Node tests that start the real `wrangler dev` the way `npm start` does.
 * Both talk to real HTTP receivers on 127.0.0.1, never to a mock of a binding.
 */
export default defineConfig({
  test: {
    projects: [
      {
        plugins: [
          cloudflareTest(async ({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                API_TOKEN: "test-token",
                // Many shards, so that tests rarely share one and each can drive its own alarm.
                SHARD_COUNT: "4096",
                TEST_MIGRATIONS: await readD1Migrations("./migrations"),
                RECEIVER_URL: inject<string>("receiverUrl"),
              },
            },
          })),
        ],
        test: {
          name: "workers",
          include: ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts"],
          globalSetup: ["test/support/receiver-setup.ts"],
          setupFiles: ["test/support/apply-migrations.ts"],
          testTimeout: 30_000,
          // One file at a time: fault points are armed per isolate, and a file's fault must
          // not fire in another file's test.
          fileParallelism: false,
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          testTimeout: 180_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
