#!/usr/bin/env node
// `npm start`: applies the local D1 migrations, runs `wrangler dev`, prints the URL and the
// API token, and fires the cron trigger on its schedule, which `wrangler dev` does not do by
// itself: without it the reconciliation sweep would never run locally.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname } from "node:path";

const port = Number(process.env.PORT ?? 8787);
const token = process.env.API_TOKEN ?? "dev-token";
const persistTo = process.env.PERSIST_DIR; // default: wrangler's own .wrangler/state
const sweepEveryMs = Number(process.env.SWEEP_INTERVAL_MS ?? 60_000); // the cron trigger is "* * * * *"
const base = `http://127.0.0.1:${port}`;
const wrangler = new URL("../node_modules/wrangler/bin/wrangler.js", import.meta.url).pathname;
const persist = persistTo ? ["--persist-to", persistTo] : [];
// A private dev registry: with the shared default, every other `wrangler dev` on the machine
// starting or stopping reloads this one, and a reload drops the local queue's messages.
const registry = process.env.WRANGLER_REGISTRY_PATH ?? new URL(`../.wrangler/registry-${port}`, import.meta.url).pathname;

const migrate = spawnSync(process.execPath, [wrangler, "d1", "migrations", "apply", "edgecron", "--local", ...persist], {
  stdio: ["ignore", "inherit", "inherit"],
  env: { ...process.env, CI: "true" }, // never prompt
});
if (migrate.status !== 0) process.exit(migrate.status ?? 1);

/**
 * Local secrets: made once and kept beside the local state, because targets sealed with one
 * ENCRYPTION_KEYS must open after a restart. Production sets its own with `wrangler secret put`.
 */
function devSecrets() {
  const path = persistTo ? `${persistTo}/dev-secrets.json` : new URL("../.wrangler/dev-secrets.json", import.meta.url).pathname;
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true });
    const secrets = { ENCRYPTION_KEYS: `dev1:${randomBytes(32).toString("base64")}`, SIGNING_SECRET: randomBytes(32).toString("hex") };
    writeFileSync(path, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return JSON.parse(readFileSync(path, "utf8"));
}

const vars = {
  API_TOKEN: token,
  // PUBLIC_URL lets targets that answer 202 find POST /v1/runs/:id/complete (X-Edgecron-Complete-Url).
  PUBLIC_URL: `http://localhost:${port}`,
  // Local targets live on loopback; a deployed Worker leaves this off.
  ALLOW_PRIVATE_TARGETS: "true",
  ...devSecrets(),
};
for (const name of ["ENCRYPTION_KEYS", "SIGNING_SECRET"]) if (process.env[name]) vars[name] = process.env[name];
for (const name of ["CLAIM_TIMEOUT_MS", "SHARD_COUNT"]) if (process.env[name]) vars[name] = process.env[name];
// wrangler's devtools port defaults to 9229 for every `wrangler dev`; two stacks started at
// once would fight over it, so each takes a free one.
const inspectorPort =
  process.env.INSPECTOR_PORT ??
  (await new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(String(free)));
    });
  }));
const dev = spawn(
  process.execPath,
  [
    wrangler,
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--inspector-port",
    inspectorPort,
    "--show-interactive-dev-session=false",
    ...persist,
    ...Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}:${v}`]),
  ],
  {
    stdio: ["ignore", "inherit", "inherit"],
    // wrangler.toml lists the required secrets; wrangler looks for them in its environment and
    // warns when they are missing there, even when --var supplies them.
    env: {
      ...process.env,
      WRANGLER_REGISTRY_PATH: registry,
      API_TOKEN: vars.API_TOKEN,
      ENCRYPTION_KEYS: vars.ENCRYPTION_KEYS,
      SIGNING_SECRET: vars.SIGNING_SECRET,
    },
  },
);

let sweeper;
const stop = (code) => {
  clearInterval(sweeper);
  dev.kill("SIGTERM");
  process.exit(code);
};
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));
dev.on("exit", (code) => {
  clearInterval(sweeper);
  process.exit(code ?? 1);
});

async function sweep() {
  try {
    await fetch(`${base}/cdn-cgi/local/scheduled?cron=${encodeURIComponent("* * * * *")}`);
  } catch (err) {
    console.error(`[edgecron] sweep could not reach wrangler dev: ${err.message}`);
  }
}

for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/healthz`)).ok) break;
  } catch {}
  if (i > 600) stop(1);
  await new Promise((r) => setTimeout(r, 200));
}
console.log(
  `\n[edgecron] ready on http://localhost:${port}\n[edgecron] API token: ${token}\n[edgecron]   curl -H 'Authorization: Bearer ${token}' ${base}/v1/jobs\n`,
);
await sweep(); // picks up anything a crash left between D1 and a shard before this start
sweeper = setInterval(sweep, sweepEveryMs);
