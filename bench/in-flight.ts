/**
 * How many target calls edgecron's local stack can have waiting at once, so that the BullMQ
 * peer can be given as many (bench/README.md, "Calls in flight"): each consumer invocation
 * holds at most MAX_OPEN_CONNECTIONS, and miniflare's broker delivers one batch at a time per
 * queue, so the invocations at once are the dispatch queues the runner consumes.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { MAX_OPEN_CONNECTIONS } from "../src/consumer/connections.ts";

export interface InFlight {
  perInvocation: number;
  /** Consumer invocations at once: the dispatch queues, one batch each at a time locally. */
  invocations: number;
  total: number;
}

/** The dispatch queues a wrangler config's DISPATCH_QUEUES var names. */
export function dispatchQueuesOf(toml: string): string[] {
  const value = /^\s*DISPATCH_QUEUES\s*=\s*"([^"]*)"/m.exec(toml)?.[1];
  if (value === undefined) throw new Error("no DISPATCH_QUEUES in the runner's config");
  return value
    .split(",")
    .map((q) => q.trim())
    .filter(Boolean);
}

export function edgecronInFlight(toml: string): InFlight {
  const invocations = dispatchQueuesOf(toml).length;
  return { perInvocation: MAX_OPEN_CONNECTIONS, invocations, total: MAX_OPEN_CONNECTIONS * invocations };
}

/** edgecron's calls in flight from the repository's runner config. */
export const localEdgecronInFlight = (root: string): InFlight =>
  edgecronInFlight(readFileSync(join(root, "runner", "wrangler.toml"), "utf8"));
