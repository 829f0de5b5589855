import { useState } from "preact/hooks";
import type { EdgecronClient } from "../../src/client/index.ts";
import { ErrorText, type Notice, NoticeText } from "../components/messages.tsx";
import { RunDetails } from "../components/run-details.tsx";
import { may, useAccess } from "../lib/access.ts";
import { hrefOf } from "../lib/route.ts";
import { localTime } from "../lib/time.ts";
import { messageOf, useApi } from "../lib/use-api.ts";

/** Runs that used every attempt; retry gives one a fresh set of attempts. */
export function DeadLetters({ client }: { client: EdgecronClient }) {
  const dead = useApi(() => client.runs.deadLetters({ limit: 100 }), [client], 5_000);
  const [open, setOpen] = useState<string | null>(null);
  const [notice, setNotice] = useState<Notice | null>(null);
  const canRetry = may(useAccess(), "write");

  async function retry(runId: string) {
    try {
      await client.runs.retry(runId);
      setNotice({ ok: true, text: `Run ${runId} goes again.` });
      dead.reload();
    } catch (err) {
      setNotice({ ok: false, text: messageOf(err) });
    }
  }

  const items = dead.data?.items ?? [];
  return (
    <section aria-labelledby="dead-title">
      <h1 id="dead-title">Dead letters</h1>
      <NoticeText notice={notice} />
      <ErrorText message={dead.error} />
      {dead.loading && !dead.data ? (
        <p aria-live="polite">Loading…</p>
      ) : items.length === 0 ? (
        <p class="muted">No dead letters.</p>
      ) : (
        <ul class="cards">
          {items.map((run) => (
            <li key={run.id} class="card">
              <p>
                <a href={hrefOf({ page: "job", id: run.jobId })}>{run.jobId}</a> · scheduled {localTime(run.scheduledAt)} · {run.attempts}{" "}
                attempts
              </p>
              <p class="error-text">{run.error ?? `last status ${run.status ?? "none"}`}</p>
              <div class="actions">
                {canRetry && (
                  <button type="button" onClick={() => retry(run.id)}>
                    Retry
                  </button>
                )}
                <button
                  type="button"
                  class="secondary"
                  aria-expanded={open === run.id}
                  onClick={() => setOpen(open === run.id ? null : run.id)}
                >
                  Attempts
                </button>
              </div>
              {open === run.id && <RunDetails client={client} runId={run.id} />}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
