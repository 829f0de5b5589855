import { fileURLToPath } from "node:url";
import { unstable_readConfig } from "wrangler";

/**
 * The runner Worker's config (runner/wrangler.toml) as wrangler reads it, and its queue
 * consumers in the shape miniflare takes them. The workerd tests run one Worker, the scheduler
 * (./wrangler.toml, which has no consumers), so vitest.config.ts gives it the runner's consumers
 * from here: the tests consume with the settings the runner deploys with, never a copy of them.
 */

export const RUNNER_CONFIG = fileURLToPath(new URL("../../runner/wrangler.toml", import.meta.url));
export const SCHEDULER_CONFIG = fileURLToPath(new URL("../../wrangler.toml", import.meta.url));

export interface QueueConsumerConfig {
  queue: string;
  max_batch_size?: number;
  max_batch_timeout?: number;
  max_retries?: number;
  dead_letter_queue?: string;
  max_concurrency?: number | null;
  retry_delay?: number;
}

/** The part of a wrangler config (as wrangler resolves it) that the two Workers' configs share. */
export interface WranglerConfig {
  name: string | undefined;
  main: string | undefined;
  compatibility_date: string | undefined;
  vars: Record<string, unknown>;
  secrets?: { required?: string[] } | undefined;
  d1_databases: { binding: string; database_name?: string | undefined; database_id?: string | undefined }[];
  durable_objects: { bindings: { name: string; class_name: string; script_name?: string | undefined }[] };
  queues: { producers?: { binding: string; queue: string }[] | undefined; consumers?: QueueConsumerConfig[] | undefined };
  r2_buckets: { binding: string }[];
  migrations: unknown[];
}

export const readWranglerConfig = (path: string): WranglerConfig => unstable_readConfig({ config: path });

export interface MiniflareQueueConsumer {
  maxBatchSize?: number;
  maxBatchTimeout?: number;
  maxRetries?: number;
  deadLetterQueue?: string;
  retryDelay?: number;
}

/**
 * The runner's [[queues.consumers]] as miniflare's `queueConsumers`, field for field as wrangler
 * maps them for `wrangler dev`. max_concurrency has no local counterpart (the local broker
 * delivers one batch at a time), so it is left out, as wrangler leaves it out.
 */
export function runnerQueueConsumers(): Record<string, MiniflareQueueConsumer> {
  const consumers = readWranglerConfig(RUNNER_CONFIG).queues.consumers ?? [];
  return Object.fromEntries(
    consumers.map((c: QueueConsumerConfig) => [
      c.queue,
      {
        ...(c.max_batch_size !== undefined && { maxBatchSize: c.max_batch_size }),
        ...(c.max_batch_timeout !== undefined && { maxBatchTimeout: c.max_batch_timeout }),
        ...(c.max_retries !== undefined && { maxRetries: c.max_retries }),
        ...(c.dead_letter_queue !== undefined && { deadLetterQueue: c.dead_letter_queue }),
        ...(c.retry_delay !== undefined && { retryDelay: c.retry_delay }),
      },
    ]),
  );
}
