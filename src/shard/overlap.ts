import type { OVERLAP_POLICIES } from "../model/job";
import type { RunState } from "../model/run-states";

export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

export type OverlapDecision = { run: "queued"; cancel: string[] } | { run: "buffered" } | { run: "skipped"; reason: string };

/**
 * What a new fire becomes, given the job's overlap policy and its unfinished runs (oldest
 * first): allow starts it; forbid records it skipped; buffer_one lets one fire wait, skipping
 * any further one; replace cancels the unfinished runs and starts it.
 */
export function decideOverlap(
  policy: OverlapPolicy,
  unfinished: ReadonlyArray<{ id: string; state: RunState }>,
  alreadyBuffered: boolean,
): OverlapDecision {
  const previous = unfinished.at(-1);
  if (policy === "allow" || previous === undefined) return { run: "queued", cancel: [] };
  switch (policy) {
    case "forbid":
      return { run: "skipped", reason: `overlap forbid: run ${previous.id} is still ${previous.state}` };
    case "buffer_one":
      return alreadyBuffered ? { run: "skipped", reason: "overlap buffer_one: a fire already waits" } : { run: "buffered" };
    case "replace":
      return { run: "queued", cancel: unfinished.map((r) => r.id) };
  }
}
