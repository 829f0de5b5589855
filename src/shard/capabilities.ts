import { writeArchive } from "../archive/run-archive";
import { Admitter } from "./admitter";
import { Completions } from "./completion";
import { Dispatcher } from "./dispatch";
import { Firing } from "./firing";
import { HistoryStore } from "./history-store";
import type { ShardHost } from "./host";
import { RunLedger } from "./ledger";
import { Outcomes } from "./outcomes";
import { Retention } from "./retention";
import { ShardStore } from "./store";
import { ViewStore } from "./view-store";
import { Views } from "./views";
import { Workflows } from "./workflows";

/** The shard's capabilities (docs/architecture.md, "The shard's capabilities"), over its store. */
export interface ShardCapabilities {
  store: ShardStore;
  ledger: RunLedger;
  firing: Firing;
  admitter: Admitter;
  dispatcher: Dispatcher;
  completions: Completions;
  workflows: Workflows;
  outcomes: Outcomes;
  views: Views;
  retention: Retention;
}

/**
 * Makes the capabilities over `host` and wires them to one another: each is given the host and
 * the capabilities it uses, by name. `archive`: the bucket expired history goes to; without
 * one, it is only deleted.
 */
export function makeCapabilities(host: ShardHost, archive: R2Bucket | undefined): ShardCapabilities {
  const store = new ShardStore(host.sql);
  const dispatcher = new Dispatcher(host, store);
  const ledger = new RunLedger(host, store, dispatcher, {
    moved: (before, events, after, attempt) => host.meter.counters.moved(before, events, after, attempt),
    finished: (run, now) => {
      // A workflow's step moves its run on: the run, not each step, is what finished (cost, outcomes).
      if (workflows.ended(run, now) === "step") return;
      host.meter.count("runsFinished");
      host.meter.counters.finished(run);
      outcomes.noteFinished(run);
    },
  });
  // A resend whose permit's place was given away ends as a lost attempt, in a change of its own (dispatch.ts, `sendOnPermit`).
  dispatcher.onPlaceGivenAway = (dispatches) => host.change((now) => ledger.endForPermit(dispatches, now));
  const workflows = new Workflows(host, store, ledger);
  const firing = new Firing(host, store, ledger, workflows);
  const outcomes = new Outcomes(host, store, firing);
  const history = new HistoryStore(host.sql, () => store.firedThrough.passedThrough());
  return {
    store,
    ledger,
    firing,
    admitter: new Admitter(host, store, ledger),
    dispatcher,
    completions: new Completions(store, ledger, workflows),
    workflows,
    outcomes,
    views: new Views(store, new ViewStore(host.sql), workflows.steps),
    retention: new Retention(host, history, store, archive ? (shard, runs) => writeArchive(archive, shard, runs, Date.now()) : null),
  };
}
