import { existsSync, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { RUNNER_CONFIG, readWranglerConfig, runnerQueueConsumers, SCHEDULER_CONFIG, type WranglerConfig } from "../support/runner-config";

/**
 * The two Workers' configs agree (docs/runner.md): the runner (runner/wrangler.toml) consumes
 * every queue the scheduler (wrangler.toml) sends to, and each of their dead-letter queues, with
 * the settings the scheduler's queues were tuned for; it reaches the scheduler's objects and
 * catalog; and it is bound to what src/runner.ts's RunnerEnv says, with the same values. Each
 * check names the field that differs.
 */

const scheduler = readWranglerConfig(SCHEDULER_CONFIG);
const runner = readWranglerConfig(RUNNER_CONFIG);

/** What every dispatch queue's consumer is set to (the reasons are in runner/wrangler.toml). */
const DISPATCH_CONSUMER = { max_batch_size: 10, max_concurrency: 250, max_batch_timeout: 0, max_retries: 5 };
const DEAD_LETTER_CONSUMER = { max_batch_size: 10, max_batch_timeout: 1 };

const consumers = runner.queues.consumers ?? [];
const consumerOf = (queue: string) => consumers.find((c) => c.queue === queue);
const producers = (config: WranglerConfig) => (config.queues.producers ?? []).map((p) => ({ binding: p.binding, queue: p.queue }));

const databases = (config: WranglerConfig) =>
  config.d1_databases.map(({ binding, database_name, database_id }) => ({ binding, database_name, database_id }));

/** The names src/runner.ts leaves out of the scheduler's Env for the runner's. */
function keysLeftOut(): string[] {
  const source = readFileSync(resolve(dirname(RUNNER_CONFIG), "../src/runner.ts"), "utf8");
  const omitted = /export type RunnerEnv = Omit<Env, ([^>]+)>;/.exec(source);
  expect(omitted, "src/runner.ts declares RunnerEnv as Omit<Env, …>").not.toBeNull();
  return [...omitted![1]!.matchAll(/"([A-Z_0-9]+)"/g)].map((m) => m[1]!);
}

/** Every binding name a config gives its Worker's env. */
function bindingNames(config: WranglerConfig): string[] {
  return [
    ...Object.keys(config.vars),
    ...(config.secrets?.required ?? []),
    ...config.d1_databases.map((d) => d.binding),
    ...config.durable_objects.bindings.map((d) => d.name),
    ...(config.queues.producers ?? []).map((p) => p.binding),
    ...config.r2_buckets.map((r) => r.binding),
  ].sort();
}

describe("the runner's wrangler config and the scheduler's", () => {
  it("the scheduler consumes nothing; the runner consumes each queue the scheduler sends to, with its dead-letter queue", () => {
    expect(scheduler.queues.consumers ?? [], "wrangler.toml [[queues.consumers]]").toEqual([]);
    const sent = producers(scheduler).map((p) => p.queue);
    expect(sent.length).toBeGreaterThan(0);
    const expected = sent.flatMap((queue) => [queue, `${queue}-dlq`]).sort();
    expect(consumers.map((c) => c.queue).sort(), "runner/wrangler.toml [[queues.consumers]] queue").toEqual(expected);
    for (const queue of sent) {
      expect(consumerOf(queue), `the consumer of ${queue}`).toEqual({ queue, ...DISPATCH_CONSUMER, dead_letter_queue: `${queue}-dlq` });
      expect(consumerOf(`${queue}-dlq`), `the consumer of ${queue}-dlq`).toEqual({ queue: `${queue}-dlq`, ...DEAD_LETTER_CONSUMER });
    }
  });

  it("the workerd tests consume with the runner's settings", () => {
    const local = runnerQueueConsumers();
    for (const c of consumers) {
      expect(local[c.queue], `vitest's queueConsumers for ${c.queue}`).toEqual({
        maxBatchSize: c.max_batch_size,
        maxBatchTimeout: c.max_batch_timeout,
        ...(c.max_retries !== undefined && { maxRetries: c.max_retries }),
        ...(c.dead_letter_queue !== undefined && { deadLetterQueue: c.dead_letter_queue }),
      });
    }
    expect(Object.keys(local).sort()).toEqual(consumers.map((c) => c.queue).sort());
  });

  it("the runner reaches the scheduler's objects by script_name and its catalog by the same database", () => {
    expect(runner.main, "runner main").toBe(resolve(dirname(RUNNER_CONFIG), "../src/runner.ts"));
    expect(existsSync(runner.main!)).toBe(true);
    expect(runner.name).toBe("edgecron-runner");
    expect(runner.compatibility_date, "compatibility_date").toBe(scheduler.compatibility_date);
    expect(runner.migrations ?? [], "the runner defines no Durable Object class").toEqual([]);
    // Every object the scheduler binds, but those RunnerEnv leaves out (the sign-in throttle).
    const leftOut = keysLeftOut();
    expect(runner.durable_objects.bindings, "runner [[durable_objects.bindings]]").toEqual(
      scheduler.durable_objects.bindings
        .filter((b) => !leftOut.includes(b.name))
        .map((b) => ({
          name: b.name,
          class_name: b.class_name,
          script_name: scheduler.name,
        })),
    );
    expect(databases(runner), "runner [[d1_databases]]").toEqual(databases(scheduler));
  });

  it("the runner has the scheduler's vars, producers and secrets, less what RunnerEnv leaves out", () => {
    expect(runner.vars, "runner [vars]").toEqual(scheduler.vars);
    expect(producers(runner), "runner [[queues.producers]]").toEqual(producers(scheduler));
    const leftOut = keysLeftOut();
    expect(leftOut.sort()).toEqual(["API_TOKEN", "ARCHIVE", "SIGN_IN_THROTTLE"]);
    expect(bindingNames(runner), "the runner's bindings").toEqual(bindingNames(scheduler).filter((name) => !leftOut.includes(name)));
  });
});
