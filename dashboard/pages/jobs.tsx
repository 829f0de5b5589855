import { useState } from "preact/hooks";
import type { EdgecronClient, Job } from "../../src/client/index.ts";
import { ErrorText } from "../components/messages.tsx";
import { JobState, jobState } from "../components/state.tsx";
import { may, seesTenant, useAccess } from "../lib/access.ts";
import { hrefOf } from "../lib/route.ts";
import { localTime, relative } from "../lib/time.ts";
import { messageOf, useApi } from "../lib/use-api.ts";

const PAGE = 100;

/** The tenant's jobs, newest first, a page at a time; search and the state filter apply to what is loaded. */
export function Jobs({ client }: { client: EdgecronClient }) {
  const [extra, setExtra] = useState<{ jobs: Job[]; cursor: string | null } | null>(null);
  const [query, setQuery] = useState("");
  const [state, setState] = useState("all");
  const [moreError, setMoreError] = useState<string | null>(null);
  const access = useAccess();
  const first = useApi(() => client.jobs.list({ limit: PAGE }), [client], 10_000);
  // The tenant's metrics are about all its jobs: a key limited to some of them may not read them.
  const health = useApi(
    () =>
      seesTenant(access)
        ? client.api.GET("/v1/metrics", { params: { query: { window: "1h" } } }).then((a) => a.data)
        : Promise.resolve(undefined),
    [client, access],
    10_000,
  );

  const jobs = [...(first.data?.items ?? []), ...(extra?.jobs ?? [])];
  const cursor = extra ? extra.cursor : (first.data?.nextCursor ?? null);
  const needle = query.trim().toLowerCase();
  const shown = jobs.filter(
    (job) =>
      (state === "all" || jobState(job) === state) &&
      (needle === "" ||
        [job.id, job.name ?? "", job.description, job.target?.url ?? "", ...(job.steps ?? []).map((s) => s.target.url)].some((text) =>
          text.toLowerCase().includes(needle),
        )),
  );

  async function loadMore() {
    if (!cursor) return;
    try {
      const page = await client.jobs.list({ limit: PAGE, cursor });
      setExtra({ jobs: [...(extra?.jobs ?? []), ...page.items], cursor: page.nextCursor });
    } catch (err) {
      setMoreError(messageOf(err));
    }
  }

  const lag = health.data?.fireLagMs;
  return (
    <section aria-labelledby="jobs-title">
      <div class="title-row">
        <h1 id="jobs-title">Jobs</h1>
        {may(access, "write") && (
          <a class="button" href={hrefOf({ page: "new-job" })}>
            New job
          </a>
        )}
      </div>
      {health.data && (
        <dl class="tiles" aria-label="Last hour">
          <div>
            <dt>Fire lag p50 / p99 (1 h)</dt>
            <dd>{lag?.count ? `${lag.p50} / ${lag.p99} ms` : "—"}</dd>
          </div>
          <div>
            <dt>Failure rate (1 h)</dt>
            <dd>{health.data.attempts.failureRate === null ? "—" : `${(health.data.attempts.failureRate * 100).toFixed(1)} %`}</dd>
          </div>
          <div>
            <dt>Waiting for a consumer</dt>
            <dd>{health.data.awaitingClaim}</dd>
          </div>
        </dl>
      )}
      <div class="filters">
        <label>
          Search
          <input type="search" value={query} onInput={(e) => setQuery(e.currentTarget.value)} placeholder="name, id, URL, schedule" />
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState(e.currentTarget.value)}>
            <option value="all">all</option>
            <option value="active">active</option>
            <option value="paused">paused</option>
            <option value="completed">completed</option>
          </select>
        </label>
      </div>
      <ErrorText message={first.error} />
      {first.loading && !first.data ? (
        <p aria-live="polite">Loading…</p>
      ) : shown.length === 0 ? (
        <p class="muted">{jobs.length === 0 ? "No jobs yet." : "No job matches."}</p>
      ) : (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Schedule</th>
                <th scope="col">State</th>
                <th scope="col">Next run</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((job) => (
                <tr key={job.id}>
                  <td>
                    <a href={hrefOf({ page: "job", id: job.id })}>{job.name ?? job.id}</a>
                  </td>
                  <td>{job.description}</td>
                  <td>
                    <JobState job={job} />
                  </td>
                  <td title={localTime(job.nextRunAt)}>{relative(job.nextRunAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && (
        <button type="button" onClick={loadMore}>
          Load more
        </button>
      )}
      <ErrorText message={moreError} />
    </section>
  );
}
