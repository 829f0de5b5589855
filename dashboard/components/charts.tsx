import type { Bucket, LagPoint } from "../lib/series.ts";
import { localTime } from "../lib/time.ts";

/*
 * Two small charts drawn as SVG by hand: a chart library (Chart.js, uPlot) would weigh more
 * than the whole dashboard for a line and a bar chart, and draws on a canvas a screen reader
 * cannot read. Each chart has a text summary and a title per point.
 */

const W = 600;
const H = 120;

function ms(value: number): string {
  return value < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`;
}

export function LagChart({ points }: { points: LagPoint[] }) {
  if (points.length === 0) return <p class="muted">No run has started yet.</p>;
  const max = Math.max(...points.map((p) => p.lagMs), 1);
  const first = points[0]!.at;
  const span = Math.max(points[points.length - 1]!.at - first, 1);
  const x = (at: number) => (points.length === 1 ? W / 2 : ((at - first) / span) * (W - 10) + 5);
  const y = (lag: number) => H - 5 - (lag / max) * (H - 20);
  const sorted = points.map((p) => p.lagMs).sort((a, b) => a - b);
  const p50 = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return (
    <figure class="chart">
      <figcaption>
        Fire lag (scheduled → started): median {ms(p50)}, max {ms(max)} over {points.length} runs
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`Fire lag per run, median ${ms(p50)}, max ${ms(max)}`}>
        <polyline class="lag-line" points={points.map((p) => `${x(p.at)},${y(p.lagMs)}`).join(" ")} />
        {points.map((p) => (
          <circle key={p.runId} class="lag-dot" cx={x(p.at)} cy={y(p.lagMs)} r="3">
            <title>{`${localTime(new Date(p.at).toISOString())}: ${ms(p.lagMs)}`}</title>
          </circle>
        ))}
      </svg>
    </figure>
  );
}

export function FailureChart({ buckets }: { buckets: Bucket[] }) {
  if (buckets.length === 0) return <p class="muted">No run has finished yet.</p>;
  const max = Math.max(...buckets.map((b) => b.finished), 1);
  const width = W / buckets.length;
  const failed = buckets.reduce((n, b) => n + b.failed, 0);
  const finished = buckets.reduce((n, b) => n + b.finished, 0);
  return (
    <figure class="chart">
      <figcaption>
        Failures over time: {failed} of {finished} finished runs failed
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`${failed} of ${finished} finished runs failed`}>
        {buckets.map((b, i) => {
          const total = (b.finished / max) * (H - 10);
          const bad = (b.failed / max) * (H - 10);
          return (
            <g key={b.start}>
              <title>{`${localTime(new Date(b.start).toISOString())}: ${b.failed} failed of ${b.finished}`}</title>
              <rect class="bar-ok" x={i * width + 1} y={H - total} width={Math.max(width - 2, 1)} height={total - bad} />
              <rect class="bar-failed" x={i * width + 1} y={H - bad} width={Math.max(width - 2, 1)} height={bad} />
            </g>
          );
        })}
      </svg>
    </figure>
  );
}
