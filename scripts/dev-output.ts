/**
 * What `npm start` (scripts/start.mjs) makes of wrangler's output when it is quiet: every byte
 * goes to a log file, and the console gets only what a developer must see: errors, and one line
 * per sweep instead of the Worker's JSON report.
 */
import { closeSync, fstatSync, mkdirSync, openSync, readSync } from "node:fs";
import { dirname } from "node:path";
import type { Readable } from "node:stream";

// biome-ignore lint/suspicious/noControlCharactersInRegex: it must match the ESC that starts an ANSI colour code
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
/** How the Worker's scheduled handler logs its report (src/index.ts); bench/stack-log.ts reads the same. */
const SWEEP = '{"sweep":';
/**
 * The first line of an error: "✘ [ERROR]" is how wrangler prints its own errors and the
 * Worker's console.error and uncaught exceptions (queue, alarm, scheduled handlers), on stderr;
 * "[wrangler:error]" an exception a request left uncaught, on stdout.
 */
const ERROR_START = /^(✘ \[ERROR\]|\[wrangler:error\])/;
const BYTES_READ_FOR_TAIL = 64 * 1024;

/** The figures of the Worker's SweepReport (src/reconcile/sweep.ts) that its line shows. */
export interface SweepFigures {
  shards: number;
  jobsRepaired: number;
  durationMs: number;
}

export interface QuietConsole {
  error(line: string): void;
  sweep(report: SweepFigures): void;
}

/**
 * Sorts the lines of one of wrangler's streams for a quiet console. Shown: a block that opens
 * with an error line (ERROR_START), with the indented lines after it (its message and stack),
 * up to the next line that is not indented; blank lines are dropped. A sweep's report becomes
 * `sweep(...)`. Everything else (the banner, the bindings table, warnings such as the
 * unreachable Request.cf service offline or cron triggers not fired locally, one line per
 * request) is left to the log. Each stream needs its own: a block never spans two streams.
 */
export function quietConsole(show: QuietConsole): (line: string) => void {
  let inError = false;
  return (raw) => {
    const line = raw.replace(ANSI, "").trimEnd();
    if (line === "") return;
    if (/^\s/.test(line)) {
      if (inError) show.error(line);
      return;
    }
    inError = ERROR_START.test(line);
    if (inError) show.error(line);
    else if (line.startsWith(SWEEP)) {
      const report = sweepOf(line);
      if (report) show.sweep(report);
    }
  };
}

function sweepOf(line: string): SweepFigures | null {
  try {
    const { shards, jobsRepaired, durationMs } = JSON.parse(line).sweep;
    return [shards, jobsRepaired, durationMs].every(Number.isFinite) ? { shards, jobsRepaired, durationMs } : null;
  } catch {
    return null; // a line cut short: it is in the log all the same
  }
}

/** `[edgecron] 15:04:05 sweep: 3 shards checked, 0 repaired (41 ms)`, at the local time of `at`. */
export function sweepLine(report: SweepFigures, at: Date): string {
  const shards = `${report.shards} shard${report.shards === 1 ? "" : "s"}`;
  return `[edgecron] ${clock(at)} sweep: ${shards} checked, ${report.jobsRepaired} repaired (${report.durationMs} ms)`;
}

/**
 * A line as the log keeps it: a `qstash_token` query parameter (a /v2 credential, src/api/auth.ts)
 * marked, as wrangler prints each request's URL, query included.
 */
export const logLine = (line: string) => line.replace(/([?&]qstash_token=)[^&\s#]*/gi, "$1[redacted]");

/** HH:MM:SS, local time. */
export const clock = (at: Date) => at.toTimeString().slice(0, 8);

/** Calls `take` with each line of `stream` as it comes; a last line without a newline too, at its end. */
export function eachLine(stream: Readable, take: (line: string) => void): void {
  let partial = "";
  stream.on("data", (chunk: Buffer) => {
    const lines = (partial + chunk.toString("utf8")).split(/\r?\n/);
    partial = lines.pop()!;
    for (const line of lines) take(line);
  });
  stream.on("end", () => {
    if (partial !== "") take(partial);
  });
}

/**
 * Opens the log for writing, emptied: it holds this start only. Written synchronously, so that
 * nothing is lost when start.mjs exits right after a failure.
 */
export function openLog(path: string): number {
  mkdirSync(dirname(path), { recursive: true });
  return openSync(path, "w");
}

/** The last `count` lines of the log (ANSI colours removed), read from its end only. */
export function lastLines(path: string, count: number): string {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buffer = Buffer.alloc(Math.min(size, BYTES_READ_FOR_TAIL));
    readSync(fd, buffer, 0, buffer.length, size - buffer.length);
    return buffer.toString("utf8").replace(ANSI, "").trimEnd().split(/\r?\n/).slice(-count).join("\n");
  } finally {
    closeSync(fd);
  }
}
