#!/usr/bin/env node
// A local HTTP target for trying edgecron: prints every request it receives and answers 200
// (or the status in ?status=, to watch retries). `npm run target`; PORT defaults to 9000.
import { createServer } from "node:http";

const port = Number(process.env.PORT ?? 9000);
createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const status = Number(new URL(req.url, "http://target").searchParams.get("status") ?? 200);
    const h = req.headers;
    console.log(
      `${new Date().toISOString()} ${req.method} ${req.url} -> ${status}  run=${h["x-edgecron-run-id"]} ` +
        `attempt=${h["x-edgecron-attempt"]} scheduled=${h["x-edgecron-scheduled-at"]}${body ? `  body=${body}` : ""}`,
    );
    res.statusCode = status;
    res.end();
  });
}).listen(port, "127.0.0.1", () => console.log(`target listening on http://127.0.0.1:${port}`));
