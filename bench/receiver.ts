import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Receipt {
  /** The receiver's Date.now() when the request's headers reached the handler. */
  t: number;
  kind: "burst" | "steady" | "calibration" | "warmup" | "unknown";
  index: number | null;
  /** Only for an unknown path. */
  path?: string;
  runId: string | null;
  scheduledAt: string | null;
  attempt: string | null;
  jobId: string | null;
}

export interface Receiver {
  server: Server;
  url: string;
  receipts: Receipt[];
  /** Burst job index → time of its first receipt. */
  firstReceipt: Map<number, number>;
  close(): Promise<void>;
}

const header = (value: string | string[] | undefined): string | null => (Array.isArray(value) ? value.join(", ") : (value ?? null));

/**
 * Records every request: path /burst/<i> is burst job i, /steady/<i> steady schedule i,
 * /calibration/<i> a calibration job, /warmup/<i> a warm-up job. The same receiver serves every system measured.
 * The answer is 200 once the (empty) body has been read, so that a slow answer never shows up
 * as scheduler lag.
 */
export async function startReceiver(host: string): Promise<Receiver> {
  const receipts: Receipt[] = [];
  const firstReceipt = new Map<number, number>();
  const server = createServer((req, res) => {
    const t = Date.now();
    const match = /^\/(burst|steady|calibration|warmup)\/(\d+)$/.exec(req.url ?? "");
    const kind = (match?.[1] as Receipt["kind"] | undefined) ?? "unknown";
    const index = match ? Number(match[2]) : null;
    receipts.push({
      t,
      kind,
      index,
      path: match ? undefined : req.url,
      runId: header(req.headers["x-edgecron-run-id"] ?? req.headers["idempotency-key"]),
      scheduledAt: header(req.headers["x-edgecron-scheduled-at"]),
      attempt: header(req.headers["x-edgecron-attempt"]),
      jobId: header(req.headers["x-edgecron-job-id"]),
    });
    if (kind === "burst" && index !== null && !firstReceipt.has(index)) firstReceipt.set(index, t);
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("ok");
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, host, resolve));
  return {
    server,
    url: `http://${host}:${(server.address() as AddressInfo).port}`,
    receipts,
    firstReceipt,
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
