/**
 * How `npm start` (scripts/start.mjs) lays the two Workers out locally: the scheduler
 * (wrangler.toml: API, sweep, shards, tenant gates) and the runner (runner/wrangler.toml: the
 * queue consumer). docs/runner.md has the figures behind the default.
 *
 * - "two": two `wrangler dev` processes, so two workerd processes and two threads, joined by
 *   the dev registry: the runner's Durable Object bindings reach the scheduler's objects, and
 *   the scheduler's queue sends reach the runner's local broker.
 * - "one": one `wrangler dev` with both configs, one workerd process for both Workers.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

const TOPOLOGIES = ["two", "one"] as const;
export type Topology = (typeof TOPOLOGIES)[number];
const DEFAULT_TOPOLOGY: Topology = "two";

const SCHEDULER_CONFIG = "wrangler.toml";
const RUNNER_CONFIG = "runner/wrangler.toml";
/** runner/wrangler.toml's `name`: its file in the dev registry is named so. */
export const RUNNER_NAME = "edgecron-runner";
/** wrangler.toml's `name`, the scheduler's file in the dev registry. */
export const SCHEDULER_NAME = "edgecron";

/** EDGECRON_TOPOLOGY's value, or the default; throws naming the variable and the choices. */
export function topologyOf(value: string | undefined): Topology {
  if (value === undefined || value === "") return DEFAULT_TOPOLOGY;
  if ((TOPOLOGIES as readonly string[]).includes(value)) return value as Topology;
  throw new Error(`EDGECRON_TOPOLOGY must be one of ${TOPOLOGIES.join(", ")}; got ${JSON.stringify(value)}`);
}

/** The `-c` arguments of each `wrangler dev` of a topology, the one to start first first. */
export function processConfigs(topology: Topology): string[][] {
  return topology === "two" ? [[RUNNER_CONFIG], [SCHEDULER_CONFIG]] : [[SCHEDULER_CONFIG, RUNNER_CONFIG]];
}

/**
 * Whether the runner's `wrangler dev` has registered itself, with its queue consumers, in the
 * registry directory. Until it has, the scheduler's local queue has nowhere to deliver: a
 * message sent then is dropped, not kept (miniflare's dev registry), so the scheduler starts
 * only after this is true.
 */
export function runnerRegistered(registry: string, runner = RUNNER_NAME): boolean {
  const path = join(registry, runner);
  if (!existsSync(path)) return false;
  try {
    const consumers: unknown = JSON.parse(readFileSync(path, "utf8")).queueConsumers;
    return Array.isArray(consumers) && consumers.length > 0;
  } catch {
    return false; // being written
  }
}
