import { Fragment } from "preact";
import { useState } from "preact/hooks";
import type { EdgecronClient, Job as JobRecord } from "../../src/client/index.ts";
import { FailureChart, LagChart } from "../components/charts.tsx";
import { ErrorText, type Notice, NoticeText } from "../components/messages.tsx";
import { RunDetails } from "../components/run-details.tsx";
import { JobState, RunState } from "../components/state.tsx";
import { Timeline } from "../components/timeline.tsx";
import { WorkflowGraph } from "../components/workflow-graph.tsx";
import { ZonedInstants } from "../components/zoned-instants.tsx";
import { may, useAccess } from "../lib/access.ts";
import { hrefOf } from "../lib/route.ts";
import { failuresOverTime, fireLag } from "../lib/series.ts";
import { fromLocalInput, localTime, relative } from "../lib/time.ts";
import { messageOf, useApi } from "../lib/use-api.ts";

/** Runs shown (and charted): the newest page. Refreshed every few seconds, so a run is watched as it goes. */
const RUNS = 100;
const REFRESH_MS = 2_000;

export function Job({ client, id }: { client: EdgecronClient; id: string }) {
  const job = useApi(() => client.jobs.get(id), [client, id], REFRESH_MS);
  const runs = useApi(() => client.jobs.runs(id, { limit: RUNS }), [client, id], REFRESH_MS);
  const [open, setOpen] = useState<string | null>(null);
  const [notice, setNotice] = useState<Notice | null>(null);
  const canChange = may(useAccess(), "write");

  /** Runs an action, says how it went (`describe` words its answer), and reloads what it changed. */
  async function act<T>(action: () => Promise<T>, describe: (answer: T) => string) {
    try {
      setNotice({ ok: true, text: describe(await action()) });
      job.reload();
      runs.reload();
    } catch (err) {
      setNotice({ ok: false, text: messageOf(err) });
    }
  }

  if (job.error && !job.data) return <ErrorText message={job.error} />;
  if (!job.data) return <p aria-live="polite">Loading…</p>;
  const j = job.data;
  const items = runs.data?.items ?? [];
  return (
    <article aria-labelledby="job-title">
      <div class="title-row">
        <h1 id="job-title">{j.name ?? j.id}</h1>
        <JobState job={j} />
      </div>
      <p class="lead">{j.description}</p>
      {j.pausedReason && <p class="warning">Paused: {j.pausedReason}</p>}
      <dl class="facts">
        <dt>Id</dt>
        <dd>
          <code>{j.id}</code>
        </dd>
        {j.target && (
          <>
            <dt>Target</dt>
            <dd>
              <code>
                {j.target.method} {j.target.url}
              </code>
              {/* A key without write is shown the URL's origin only (docs/security.md). */}
              {j.target.reduced && <span class="muted"> (origin only: this key may not see the whole URL)</span>}
            </dd>
          </>
        )}
        <dt>Next run</dt>
        <dd>
          {relative(j.nextRunAt)} <span class="muted">{localTime(j.nextRunAt)}</span>
        </dd>
        <dt>Retries</dt>
        <dd>{j.retry.maxAttempts ?? 1} attempts at most</dd>
        <ChainedJobs label="On success, triggers" ids={j.onSuccess} />
        <ChainedJobs label="On failure, triggers" ids={j.onFailure} />
      </dl>
      {canChange && (
        <>
          <div class="actions">
            <button
              type="button"
              onClick={() =>
                act(
                  () => (j.paused ? client.jobs.resume(id) : client.jobs.pause(id)),
                  () => (j.paused ? "Resumed." : "Paused."),
                )
              }
            >
              {j.paused ? "Resume" : "Pause"}
            </button>
            <button
              type="button"
              onClick={() =>
                act(
                  () => client.jobs.trigger(id, crypto.randomUUID()),
                  (run) => `Triggered run ${run.id}.`,
                )
              }
            >
              Trigger now
            </button>
          </div>
          <Backfill
            onSubmit={(from, to) =>
              act(
                () => client.jobs.backfill(id, { from, to }),
                (answer) => `Backfill: ${answer.created.length} runs created, ${answer.existing.length} already existed.`,
              )
            }
          />
        </>
      )}
      <NoticeText notice={notice} />

      {j.steps && (
        <section aria-labelledby="graph-title">
          <h2 id="graph-title">Workflow</h2>
          <WorkflowGraph steps={j.steps} />
        </section>
      )}

      <h2>Runs</h2>
      <ErrorText message={runs.error} />
      <Timeline runs={items} onPick={(runId) => setOpen(runId)} />
      <div class="charts">
        <LagChart points={fireLag(items)} />
        <FailureChart buckets={failuresOverTime(items)} />
      </div>
      {items.length > 0 && (
        <div class="table-wrap">
          <table class="runs">
            <thead>
              <tr>
                <th scope="col">Scheduled</th>
                <th scope="col">Trigger</th>
                <th scope="col">State</th>
                <th scope="col">Attempts</th>
                <th scope="col">Status</th>
              </tr>
            </thead>
            <tbody>
              {items.map((run) => (
                <>
                  <tr key={run.id} id={`run-${run.id}`}>
                    <td>
                      <button
                        type="button"
                        class="link"
                        aria-expanded={open === run.id}
                        onClick={() => setOpen(open === run.id ? null : run.id)}
                      >
                        {localTime(run.scheduledAt)}
                      </button>
                    </td>
                    <td>{run.trigger}</td>
                    <td>
                      <RunState state={run.state} />
                    </td>
                    <td>{run.attempts}</td>
                    <td>{run.status ?? "—"}</td>
                  </tr>
                  {open === run.id && (
                    <tr key={`${run.id}-details`}>
                      <td colSpan={5}>
                        <RunDetails client={client} runId={run.id} graph={j.steps} />
                      </td>
                    </tr>
                  )}
                </>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <SchedulePreview client={client} job={j} />
    </article>
  );
}

/** Runs for every fire between two instants, typed in the reader's local time. */
function Backfill({ onSubmit }: { onSubmit: (from: string, to: string) => void }) {
  const [from, setFrom] = useState("");
  const [to, setTo] = useState("");
  function submit(event: Event) {
    event.preventDefault();
    onSubmit(fromLocalInput(from), fromLocalInput(to));
  }
  return (
    <details class="backfill">
      <summary>Backfill</summary>
      <form class="inline-form" onSubmit={submit}>
        <label>
          From
          <input type="datetime-local" required value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
        </label>
        <label>
          To
          <input type="datetime-local" required value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </label>
        <button type="submit">Run every fire in range</button>
      </form>
    </details>
  );
}

function SchedulePreview({ client, job }: { client: EdgecronClient; job: JobRecord }) {
  const preview = useApi(() => client.schedules.preview({ schedule: job.schedule, count: 10 }), [client, job.id, job.version]);
  if (job.completed) return null;
  return (
    <section aria-labelledby="preview-title">
      <h2 id="preview-title">Upcoming</h2>
      {preview.error && <p class="muted">{preview.error}</p>}
      {preview.data && <ZonedInstants instants={preview.data.instants} timeZone={job.schedule.timezone ?? "UTC"} />}
    </section>
  );
}

/** The jobs a job triggers when its runs end one way (onSuccess/onFailure), each a link to its page. */
function ChainedJobs({ label, ids }: { label: string; ids: string[] | undefined }) {
  if (!ids?.length) return null;
  return (
    <>
      <dt>{label}</dt>
      <dd>
        {ids.map((id, i) => (
          <Fragment key={id}>
            {i > 0 && ", "}
            <a href={hrefOf({ page: "job", id })}>
              <code>{id}</code>
            </a>
          </Fragment>
        ))}
      </dd>
    </>
  );
}
