import type { Run } from "../../src/client/index.ts";
import { localTime } from "../lib/time.ts";

/**
 * The job's runs on one time axis, a mark per run at its scheduled instant, coloured by state.
 * Each mark is a link to the run's row below (its attempts), and carries its state and time as
 * a title, so the timeline is read by pointer, keyboard and screen reader alike.
 */
export function Timeline({ runs, onPick }: { runs: Run[]; onPick: (runId: string) => void }) {
  if (runs.length === 0) return <p class="muted">No runs yet.</p>;
  const times = runs.map((run) => Date.parse(run.scheduledAt));
  const first = Math.min(...times);
  const last = Math.max(...times);
  const span = Math.max(last - first, 1);
  return (
    <figure class="timeline">
      <figcaption class="sr-only">Runs by scheduled time, oldest on the left</figcaption>
      <ol class="timeline-track">
        {runs.map((run) => {
          const left = runs.length === 1 ? 50 : ((Date.parse(run.scheduledAt) - first) / span) * 100;
          return (
            <li key={run.id} style={{ left: `${left}%` }}>
              <button
                type="button"
                class={`mark state-${run.state}`}
                title={`${run.state} · ${localTime(run.scheduledAt)}`}
                aria-label={`Run ${run.id}: ${run.state}, scheduled ${localTime(run.scheduledAt)}`}
                onClick={() => onPick(run.id)}
              />
            </li>
          );
        })}
      </ol>
      <div class="timeline-axis" aria-hidden="true">
        <span>{localTime(new Date(first).toISOString())}</span>
        <span>{localTime(new Date(last).toISOString())}</span>
      </div>
    </figure>
  );
}
