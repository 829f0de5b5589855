/**
 * The Prometheus text exposition format, version 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/): HELP and TYPE lines, then the
 * samples of each family. Pure: families in, text out.
 *
 * Written here rather than with prom-client: that library keeps process-wide registries and
 * needs Node's built-in modules, which this Worker does not enable (no nodejs_compat), and the
 * format is a few lines of escaping.
 */

export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Labels = Record<string, string>;

export interface Sample {
  labels?: Labels;
  value: number;
}

export type Family =
  | { name: string; help: string; type: "gauge" | "counter"; samples: Sample[] }
  | ({
      name: string;
      help: string;
      type: "histogram";
      /** Upper bounds, ascending, without +Inf (always added). */
      buckets: readonly number[];
    } & (
      | { observations: readonly number[] }
      /**
       * Already bucketed where it was measured: `counts[i]` observations above the bound before
       * `buckets[i]` and at most it, then one more count for those above the last bound.
       */
      | { counts: readonly number[]; sum: number }
    ));

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export function renderExposition(families: Family[]): string {
  const lines: string[] = [];
  const seen = new Set<string>();
  for (const family of families) {
    // A name twice, or one the format cannot carry, is a bug here: scrapers reject the whole page.
    if (!NAME.test(family.name) || seen.has(family.name)) throw new Error(`bad or repeated metric name: ${family.name}`);
    seen.add(family.name);
    lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`, `# TYPE ${family.name} ${family.type}`);
    const rows =
      family.type === "histogram"
        ? "counts" in family
          ? bucketedRows(family.name, family.buckets, family.counts, family.sum)
          : histogramRows(family.name, family.buckets, family.observations)
        : family.samples.map((sample) => ({ name: family.name, ...sample }));
    for (const { name, labels, value } of rows) lines.push(`${name}${labelText(labels)} ${number(value)}`);
  }
  return `${lines.join("\n")}\n`;
}

/** `_bucket` counts are cumulative (each counts every observation at or below its bound). */
function histogramRows(name: string, bounds: readonly number[], observations: readonly number[]) {
  const rows: Array<Sample & { name: string }> = bounds.map((le) => ({
    name: `${name}_bucket`,
    labels: { le: number(le) },
    value: observations.filter((x) => x <= le).length,
  }));
  rows.push(
    { name: `${name}_bucket`, labels: { le: "+Inf" }, value: observations.length },
    { name: `${name}_sum`, value: observations.reduce((s, x) => s + x, 0) },
    { name: `${name}_count`, value: observations.length },
  );
  return rows;
}

/** The same rows from counts made per bucket where they were observed, accumulated here. */
function bucketedRows(name: string, bounds: readonly number[], counts: readonly number[], sum: number) {
  // A count list of another length is a bug here: its buckets would be misread.
  if (counts.length !== bounds.length + 1) throw new Error(`${name}: ${counts.length} counts for ${bounds.length} bounds and +Inf`);
  let seen = 0;
  const rows: Array<Sample & { name: string }> = bounds.map((le, i) => {
    seen += counts[i]!;
    return { name: `${name}_bucket`, labels: { le: number(le) }, value: seen };
  });
  seen += counts[bounds.length]!;
  rows.push(
    { name: `${name}_bucket`, labels: { le: "+Inf" }, value: seen },
    { name: `${name}_sum`, value: sum },
    { name: `${name}_count`, value: seen },
  );
  return rows;
}

function labelText(labels: Labels | undefined): string {
  const entries = Object.entries(labels ?? {});
  if (entries.length === 0) return "";
  for (const [name] of entries) if (!LABEL.test(name) || name.startsWith("__")) throw new Error(`bad label name: ${name}`);
  return `{${entries.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(",")}}`;
}

function number(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

/** In HELP, backslash and line feed are escaped; in label values, the double quote as well. */
const escapeHelp = (text: string) => text.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
const escapeLabelValue = (text: string) => escapeHelp(text).replaceAll('"', '\\"');
