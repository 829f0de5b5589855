#!/usr/bin/env node
// A local HTTP target for trying edgecron: prints every request it receives and answers 200
// (or the status in ?status=, to watch retries). `npm run target`; PORT defaults to 9000.
// With SIGNING_SECRETS=<current>,<next> (from GET /v1/signing-keys) it also checks each
// request's Edgecron-Signature-V2, the way a real target should (never the first scheme alone,
// which edgecron sends only beside V2).
import { createServer } from "node:http";
import { verifyRequest } from "../src/verify.ts";

const port = Number(process.env.PORT ?? 9000);
const secrets = (process.env.SIGNING_SECRETS ?? "").split(",").filter(Boolean);

createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", async () => {
    const status = Number(new URL(req.url, "http://target").searchParams.get("status") ?? 200);
    const h = req.headers;
    let signature = "";
    if (secrets.length > 0) {
      // The URL edgecron called: this server's own address and the request's path and query.
      const url = `http://${h.host}${req.url}`;
      const check = await verifyRequest({ method: req.method, url, headers: h, body, secrets });
      signature = check.ok ? `  signature=valid (${check.scheme})` : `  signature=INVALID (${check.reason})`;
    }
    console.log(
      `${new Date().toISOString()} ${req.method} ${req.url} -> ${status}  run=${h["x-edgecron-run-id"]} ` +
        `attempt=${h["x-edgecron-attempt"]} scheduled=${h["x-edgecron-scheduled-at"]}${signature}${body ? `  body=${body}` : ""}`,
    );
    res.statusCode = status;
    res.end();
  });
}).listen(port, "127.0.0.1", () => console.log(`target listening on http://127.0.0.1:${port}`));
