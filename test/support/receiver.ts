import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Hit } from "./hit";

export type { Hit };

/**
 * A real HTTP target on 127.0.0.1 for tests and benchmarks. Any request to /hit/<name>
 * is recorded and answered with ?status= (default 200) after ?delayMs= (default 0; for both, a
 * comma-separated list is used in turn, by order of arrival), with a
 * Location header when ?location= is given (a redirect), and the body ?body= (default "ok"), or
 * ?bodyBytes= bytes of it, or ?streamBytes= bytes made as they are sent (a body too large to
 * hold, which stops when the client lets go); GET /log/<name> returns what <name>
 * received, in order of arrival; GET /peak/<name> how many of <name>'s requests were open at
 * once, at most (from arrival to answer), and how many are open now; GET /sent/<name> how many
 * bytes of streamed bodies <name>'s answers wrote, and how many of them ended before their end;
 * GET /sizes/<name> each request's Idempotency-Key and body size, for bodies too large to log back.
 */
export async function startReceiver(): Promise<{ url: string; server: Server; hits: Map<string, Hit[]> }> {
  const hits = new Map<string, Hit[]>();
  const open = new Map<string, { now: number; peak: number }>();
  const sent = new Map<string, { bytes: number; cutShort: number }>();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://receiver");
    const [, kind, name = ""] = url.pathname.split("/");
    if (kind === "log" && req.method === "GET") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(hits.get(name) ?? []));
      return;
    }
    if (kind === "peak" && req.method === "GET") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(open.get(name) ?? { now: 0, peak: 0 }));
      return;
    }
    if (kind === "sizes" && req.method === "GET") {
      res.setHeader("content-type", "application/json");
      const list = (hits.get(name) ?? []).map((h) => ({ key: h.headers["idempotency-key"], bytes: Buffer.byteLength(h.body) }));
      res.end(JSON.stringify(list));
      return;
    }
    if (kind === "sent" && req.method === "GET") {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(sent.get(name) ?? { bytes: 0, cutShort: 0 }));
      return;
    }
    const count = open.get(name) ?? { now: 0, peak: 0 };
    open.set(name, count);
    count.now++;
    count.peak = Math.max(count.peak, count.now);
    res.on("close", () => count.now--);
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const receivedAt = Date.now();
      const list = hits.get(name) ?? [];
      list.push({
        method: req.method ?? "",
        path: url.pathname,
        url: `http://${req.headers.host}${req.url ?? "/"}`,
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
        body: Buffer.concat(chunks).toString("utf8"),
        bodyBase64: Buffer.concat(chunks).toString("base64"),
        receivedAt,
      });
      hits.set(name, list);
      // A list ("2500,0") is taken in turn by arrival: one target, some requests slow, some fast.
      const delays = (url.searchParams.get("delayMs") ?? "0").split(",").map(Number);
      const delay = delays[(list.length - 1) % delays.length];
      setTimeout(() => {
        const statuses = (url.searchParams.get("status") ?? "200").split(",").map(Number);
        res.statusCode = statuses[(list.length - 1) % statuses.length]!;
        const location = url.searchParams.get("location");
        if (location !== null) res.setHeader("location", location);
        // ?retryAfter= is sent as Retry-After, a list taken in turn like ?status= (an empty item: none).
        const retryAfters = url.searchParams.get("retryAfter")?.split(",");
        const retryAfter = retryAfters?.[(list.length - 1) % retryAfters.length];
        if (retryAfter) res.setHeader("retry-after", retryAfter);
        const streamed = url.searchParams.get("streamBytes");
        if (streamed !== null) {
          const tally = sent.get(name) ?? { bytes: 0, cutShort: 0 };
          sent.set(name, tally);
          return streamBody(res, Number(streamed), tally);
        }
        // ?body= is answered as the response body (a workflow step's result); ?bodyBytes= with that many bytes (of ?bodyChar=, else "x").
        const size = url.searchParams.get("bodyBytes");
        const char = url.searchParams.get("bodyChar") ?? "x";
        res.end(size !== null ? char.repeat(Number(size)) : (url.searchParams.get("body") ?? "ok"));
      }, delay);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, server, hits };
}

const STREAM_CHUNK = Buffer.alloc(64 * 1024, "x");

/**
 * Writes `total` bytes a chunk at a time, each only once the socket took the last, so what
 * `tally` counts is what the client pulled (plus the sockets' buffers), not what was queued.
 */
function streamBody(res: ServerResponse, total: number, tally: { bytes: number; cutShort: number }): void {
  let left = total;
  res.on("close", () => {
    if (left > 0) tally.cutShort++;
  });
  const more = (): void => {
    while (left > 0 && !res.destroyed) {
      const chunk = left >= STREAM_CHUNK.byteLength ? STREAM_CHUNK : STREAM_CHUNK.subarray(0, left);
      left -= chunk.byteLength;
      tally.bytes += chunk.byteLength;
      if (!res.write(chunk)) return void res.once("drain", more);
    }
    if (left === 0) res.end();
  };
  more();
}
