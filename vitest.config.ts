import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-plugin";
import { defineConfig, type TestProjectInlineConfiguration } from "vitest/config";
import { runnerQueueConsumers } from "./test/support/runner-config.ts";

/** Test-only secrets; production sets its own with `wrangler secret put`. */
const TEST_ENCRYPTION_KEYS = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const TEST_SIGNING_SECRET = "test-signing-secret-0123456789abcdef";

/** A project inside workerd, against miniflare's real D1, Durable Objects (with alarms) and Queues. */
function workerdProject(
  name: string,
  include: string[],
  allowPrivateTargets: boolean,
  exclude: string[] = [],
): TestProjectInlineConfiguration {
  return {
    plugins: [
      cloudflareTest(async ({ inject }) => ({
        wrangler: { configPath: "./wrangler.toml" },
        miniflare: {
          // Deployed, the runner Worker consumes the queues (runner/wrangler.toml); here the one
          // test Worker does, through src/index.ts's queue handler, with the runner's settings.
          queueConsumers: runnerQueueConsumers(),
          bindings: {
            API_TOKEN: "test-token-0123456789abcdef0123456789ab",
            // The admin token being rotated in (docs/security.md): accepted beside API_TOKEN.
            API_TOKEN_NEXT: "test-token-next-0123456789abcdef01234567",
            ENCRYPTION_KEYS: TEST_ENCRYPTION_KEYS,
            SIGNING_SECRET: TEST_SIGNING_SECRET,
            ALLOW_PRIVATE_TARGETS: String(allowPrivateTargets),
            // Many shards, so that tests rarely share one and each can drive its own alarm.
            SHARD_COUNT: "4096",
            TEST_MIGRATIONS: await readD1Migrations("./migrations"),
            RECEIVER_URL: inject<string>("receiverUrl"),
            // npm run bench:history's size: workerd does not see the shell's environment.
            BENCH_HISTORY_RUNS: process.env.BENCH_HISTORY_RUNS ?? "1000000",
          },
        },
      })),
    ],
    test: {
      name,
      include,
      exclude,
      globalSetup: ["test/support/receiver-setup.ts"],
      setupFiles: ["test/support/apply-migrations.ts"],
      testTimeout: 30_000,
      // One file at a time: fault points are armed per isolate, and a file's fault must
      // not fire in another file's test.
      fileParallelism: false,
    },
  };
}

/** The test/workerd files of the first workerd half; the second has all the others, new ones included. */
const FIRST_HALF = ["test/workerd/[a-e]*.test.ts", "test/workerd/fault-*.test.ts"];

/**
 * Layers (each test folder is named after where its files run; test/README.md has the table):
 * - `unit`: test/node-unit, pure logic, in Node;
 * - `workers`, `workers-2`: test/workerd, integration tests inside workerd, and
 *   test/workerd-unit, the zone rules' tests, in workerd since production uses its time zone
 *   data. Every receiver is on 127.0.0.1, so private targets are allowed here, as `npm start`
 *   allows them;
 * - `strict`: test/workerd-strict, the same workerd stack as deployed, private targets refused
 *   (the SSRF guard);
 * - `e2e`: test/wrangler-dev, Node tests that start the real `wrangler dev` the way `npm start`
 *   does, and test/node-tools, Node tests of what needs no Worker (the CLI, the dashboard, the
 *   bench, docs and generated files, D1 migrations upgrading a catalog that holds data).
 * All talk to real HTTP receivers on 127.0.0.1, never to a mock of a binding.
 */
export default defineConfig({
  test: {
    // Vitest 4 can end a run whose tests all passed with "EnvironmentTeardownError: Closing rpc
    // while … was pending": a worker's RPC closed while a call was still in flight at teardown
    // (vitest-dev/vitest#11153, open). That error alone says nothing about the code under test,
    // so it alone is ignored; any other unhandled error still fails the run.
    onUnhandledError: (error) => !(error.name === "EnvironmentTeardownError" && /Closing rpc while/.test(error.message)),
    projects: [
      // npm test runs these in three processes side by side (scripts/test.mjs), since one vitest
      // process here runs one file at a time: the workerd tests in two halves of about the same
      // length (test/workerd-unit, the zone rules, which are the runtime's; the fuzzers and the
      // files FIRST_HALF names; every other test/workerd file), and the Node tests.
      workerdProject("workers", ["test/workerd-unit/**/*.test.ts", "test/workerd/fuzz/**/*.test.ts", ...FIRST_HALF], true),
      workerdProject("workers-2", ["test/workerd/*.test.ts"], true, FIRST_HALF),
      workerdProject("strict", ["test/workerd-strict/**/*.test.ts"], false),
      // Not part of npm test: `npm run bench:history` (figures, no assertion on time).
      workerdProject("bench-history", ["bench/history/**/*.test.ts"], true),
      {
        // Pure logic (no binding, no storage): in Node, where a file starts in milliseconds
        // rather than the seconds a workerd file's isolate and migrated D1 take.
        test: { name: "unit", include: ["test/node-unit/**/*.test.ts"], environment: "node" },
      },
      {
        test: {
          name: "e2e",
          include: ["test/wrangler-dev/**/*.test.ts", "test/node-tools/**/*.test.ts"],
          environment: "node",
          // Each e2e file starts its own stack (wrangler, workerd): one at a time is load enough.
          fileParallelism: false,
          testTimeout: 180_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
