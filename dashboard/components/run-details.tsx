import type { EdgecronClient } from "../../src/client/index.ts";
import { jobIdOfRun } from "../../src/model/ids.ts";
import type { StepNode } from "../../src/workflow/graph.ts";
import { hrefOf } from "../lib/route.ts";
import { localTime } from "../lib/time.ts";
import { useApi } from "../lib/use-api.ts";
import { ErrorText } from "./messages.tsx";
import { RunState } from "./state.tsx";
import { WorkflowGraph } from "./workflow-graph.tsx";

/** One run with each of its attempts: when, how long, what the target answered. */
/** `graph`: the job's steps, for a workflow run: its steps' states are shown on the graph. */
export function RunDetails({ client, runId, graph }: { client: EdgecronClient; runId: string; graph?: readonly StepNode[] }) {
  const run = useApi(() => client.runs.get(runId), [client, runId]);
  if (run.error) return <ErrorText message={run.error} />;
  if (!run.data) return <p aria-live="polite">Loading…</p>;
  const attempts = run.data.attemptLog ?? [];
  return (
    <div class="run-details">
      <p>
        <RunState state={run.data.state} /> {run.data.error && <span class="error-text">{run.data.error}</span>}
        {run.data.result && <span> result: {run.data.result}</span>}
      </p>
      {run.data.chainedFrom && <ChainedFrom runId={run.data.chainedFrom} />}
      {graph && run.data.steps && (
        <WorkflowGraph steps={graph} states={Object.fromEntries(run.data.steps.map((step) => [step.id, step.state]))} />
      )}
      {run.data.steps ? null : attempts.length === 0 ? (
        <p class="muted">No attempt yet.</p>
      ) : (
        <table>
          <caption class="sr-only">Attempts of run {runId}</caption>
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">Started</th>
              <th scope="col">Outcome</th>
              <th scope="col">Status</th>
              <th scope="col">Took</th>
              <th scope="col">Error</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => (
              <tr key={a.attempt}>
                <td>{a.attempt}</td>
                <td>{localTime(a.startedAt)}</td>
                <td>{a.outcome.replace("_", " ")}</td>
                <td>{a.status ?? "—"}</td>
                <td>{a.durationMs === null ? "—" : `${a.durationMs} ms`}</td>
                <td>{a.error ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

/** A chained run's source: the run whose end triggered it, on its job's page. */
function ChainedFrom({ runId }: { runId: string }) {
  const jobId = jobIdOfRun(runId);
  return (
    <p>
      Triggered when run <code>{runId}</code> of{" "}
      {jobId ? (
        <a href={hrefOf({ page: "job", id: jobId })}>
          <code>{jobId}</code>
        </a>
      ) : (
        "another job"
      )}{" "}
      ended.
    </p>
  );
}
