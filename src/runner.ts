import type { QueueMessage } from "./protocol/queue-messages";
import { handleQueue } from "./queue-handler";

/**
 * What the runner is bound to (runner/wrangler.toml): the scheduler's bindings less those only
 * its API and retention use (the admin token, the archive, the sign-in throttle: the runner
 * signs no one in). test/node-tools/runner-config.test.ts keeps the config to this.
 */
export type RunnerEnv = Omit<Env, "API_TOKEN" | "ARCHIVE" | "SIGN_IN_THROTTLE">;

/**
 * The runner Worker: the queue consumer alone, deployed apart from the scheduler (src/index.ts)
 * so that it can be sized, limited and rolled out on its own. It reaches the scheduler's shards
 * and tenant gates by their script_name bindings; docs/runner.md.
 */
export default {
  queue(batch, env, ctx) {
    // The consumer's code is typed by the scheduler's Env; it never reads the two keys the
    // runner lacks (the API's token and the archive), so this Env is the one it works with.
    return handleQueue(batch, env as Env, ctx);
  },
} satisfies ExportedHandler<RunnerEnv, QueueMessage>;
