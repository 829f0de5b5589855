import { createWriteStream } from "node:fs";

export interface QueueBatch {
  endedAt: number;
  acked: number;
  size: number;
  ms: number | null;
}

export interface Observed {
  queueBatches: QueueBatch[];
  sweeps: Array<{ at: number } & Record<string, unknown>>;
  /** Times wrangler reloaded the worker. */
  reloads: number[];
  errorLines: number;
  errorExamples: string[];
  tailStreamErrors: number;
  apiRequests: number;
}

export interface StackLog {
  observed: Observed;
  /** For the stack's `onLine`. */
  onLine(raw: string, stream: "stdout" | "stderr"): void;
  close(): Promise<void>;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: it must match the ESC that starts an ANSI colour code
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
const QUEUE_BATCH = /QUEUE (\S+) (\d+)\/(\d+)(?: \((\d+)ms\))?/;
const SWEEP = '{"sweep":';

/**
 * Writes the stack's output to `path`, each line stamped with the seconds since `t0`, and scans
 * it for what the stack does not report through its API: queue batches, sweeps, reloads, errors.
 */
export function stackLog(path: string, t0: number): StackLog {
  const log = createWriteStream(path);
  const observed: Observed = {
    queueBatches: [],
    sweeps: [],
    reloads: [],
    errorLines: 0,
    errorExamples: [],
    tailStreamErrors: 0,
    apiRequests: 0,
  };
  return {
    observed,
    onLine(raw, stream) {
      const now = Date.now();
      const line = raw.replace(ANSI, "");
      log.write(`[+${((now - t0) / 1000).toFixed(3)}s ${stream === "stdout" ? "out" : "err"}] ${line}\n`);
      const batch = QUEUE_BATCH.exec(line);
      if (batch) {
        observed.queueBatches.push({
          endedAt: now,
          acked: Number(batch[2]),
          size: Number(batch[3]),
          ms: batch[4] === undefined ? null : Number(batch[4]),
        });
      } else if (line.includes(SWEEP)) {
        try {
          observed.sweeps.push({ at: now, ...JSON.parse(line.slice(line.indexOf(SWEEP))).sweep });
        } catch {
          observed.sweeps.push({ at: now });
        }
      } else if (/trace-stream.*tail session was canceled/.test(line)) {
        observed.tailStreamErrors++; // workerd's local tail/trace plumbing, not the worker's code
      } else if (/Reloading local server/.test(line)) {
        observed.reloads.push(now);
      } else if (/^\[wrangler:info\] (GET|POST|DELETE) \/v1\//.test(line)) {
        observed.apiRequests++;
      } else if (
        /ERROR|Error|error|failed|unreachable|did not confirm|✘/.test(line) &&
        !/Request\.cf|workers\.cloudflare\.com|getaddrinfo|GetAddrInfoReqWrap|update available/.test(line)
      ) {
        observed.errorLines++;
        if (observed.errorExamples.length < 10) observed.errorExamples.push(line.slice(0, 300));
      }
    },
    close: () => new Promise<void>((resolve) => log.end(resolve)),
  };
}
