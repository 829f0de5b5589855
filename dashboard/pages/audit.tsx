import { useState } from "preact/hooks";
import type { AuditEntry, EdgecronClient } from "../../src/client/index.ts";
import { ErrorText } from "../components/messages.tsx";
import { localTime } from "../lib/time.ts";
import { messageOf, useApi } from "../lib/use-api.ts";

const PAGE = 50;
const KINDS = ["", "job", "run", "key", "signing", "tenant"];

/** The audit log: who changed what, when and from where, newest first (a key with the admin scope). */
export function Audit({ client }: { client: EdgecronClient }) {
  const [kind, setKind] = useState("");
  const [extra, setExtra] = useState<{ entries: AuditEntry[]; cursor: string | null } | null>(null);
  const [moreError, setMoreError] = useState<string | null>(null);
  const filter = kind ? { action: kind } : {};
  const first = useApi(() => client.audit.list({ limit: PAGE, ...filter }), [client, kind], 10_000);
  const entries = [...(first.data?.items ?? []), ...(extra?.entries ?? [])];
  const cursor = extra ? extra.cursor : (first.data?.nextCursor ?? null);

  async function loadMore() {
    if (!cursor) return;
    try {
      const page = await client.audit.list({ limit: PAGE, cursor, ...filter });
      setExtra({ entries: [...(extra?.entries ?? []), ...page.items], cursor: page.nextCursor });
    } catch (err) {
      setMoreError(messageOf(err));
    }
  }

  return (
    <section aria-labelledby="audit-title">
      <h1 id="audit-title">Audit log</h1>
      <div class="filters">
        <label>
          Kind
          <select
            value={kind}
            onChange={(e) => {
              setExtra(null);
              setKind(e.currentTarget.value);
            }}
          >
            {KINDS.map((k) => (
              <option key={k} value={k}>
                {k || "every change"}
              </option>
            ))}
          </select>
        </label>
      </div>
      <ErrorText message={first.error} />
      {first.loading && !first.data ? (
        <p aria-live="polite">Loading…</p>
      ) : entries.length === 0 ? (
        <p class="muted">No changes recorded.</p>
      ) : (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Who</th>
                <th scope="col">What</th>
                <th scope="col">Of</th>
                <th scope="col">From</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((e) => (
                <tr key={e.id}>
                  <td>{localTime(e.at)}</td>
                  <td>
                    <code>{e.actor}</code>
                  </td>
                  <td>{e.action}</td>
                  <td>
                    <code>{e.subject}</code>
                  </td>
                  <td>{e.client ?? "—"}</td>
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
