/** The package ships no types; this is the shape its README documents (prom2json's). */
declare module "parse-prometheus-text-format" {
  export interface ParsedMetric {
    labels?: Record<string, string>;
    value?: string;
    buckets?: Record<string, string>;
    quantiles?: Record<string, string>;
    count?: string;
    sum?: string;
  }
  export interface ParsedFamily {
    name: string;
    help: string;
    type: "GAUGE" | "COUNTER" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    metrics: ParsedMetric[];
  }
  export default function parsePrometheusTextFormat(text: string): ParsedFamily[];
}
