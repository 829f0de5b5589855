import { OpenAPIHono } from "@hono/zod-openapi";
import { audit } from "./audit";
import { authenticate, authorize, authorizeQstash, limitBody, limitQstashBody, requireJsonBody } from "./auth";
import { breakers } from "./breakers";
import { docsHeaders, noSniff } from "./browser-headers";
import type { AppEnv } from "./context";
import { docs } from "./docs";
import { errorResponse, noSuchRoute } from "./errors";
import { jobs } from "./jobs";
import { jobsBatch } from "./jobs-batch";
import { keys } from "./keys";
import { me } from "./me";
import { metrics } from "./metrics";
import { nameOperation } from "./operation";
import { prometheus } from "./prometheus";
import { qstash } from "./qstash/app";
import { runs } from "./runs";
import { schedules } from "./schedules";
import { documentScopes } from "./scope-docs";
import { signing } from "./signing-keys";
import { tenants } from "./tenants";

export const app = new OpenAPIHono<AppEnv>();

app.use("*", nameOperation, noSniff);
app.onError(errorResponse);
app.notFound(() => {
  throw noSuchRoute();
});

app.get("/healthz", (c) => c.json({ ok: true }));
// The API reference: public, like the document it renders; the calls made from it need credentials as any others do.
app.get("/docs", docsHeaders, docs);

// Who is calling, then whether its key's scope allows the route (src/api/route-scopes.ts).
app.use("/v1/*", authenticate, authorize, limitBody, requireJsonBody);
app.route("/v1", jobsBatch);
app.route("/v1", jobs);
app.route("/v1", runs);
app.route("/v1", metrics);
app.route("/v1", schedules);
app.route("/v1", tenants);
app.route("/v1", keys);
app.route("/v1", signing);
app.route("/v1", breakers);
app.route("/v1", audit);
app.route("/v1", me);
// QStash's API (docs/qstash.md): any body type, as QStash takes it.
app.use("/v2/*", authenticate, authorizeQstash, limitQstashBody);
app.route("/v2", qstash);
// Outside /v1, where scrapers look for it, behind the same credentials (no body to check on a GET).
app.use("/metrics", authenticate, authorize);
app.route("/", prometheus);

/** The document's head; exported so that the typed client is generated from exactly what /openapi.json serves. */
export const OPENAPI_HEAD = {
  openapi: "3.1.0",
  info: {
    title: "edgecron",
    version: "1",
    description:
      "A distributed job scheduler on Cloudflare Workers. Every /v1 route, and /metrics, needs `Authorization: Bearer <tenant API key or admin token>`; a tenant key sees only its own tenant's jobs, runs, dead letters and metrics, and only what its scopes allow: `read` (jobs, runs, metrics), `write` (also change jobs and runs), `admin` (also keys, signing secrets, tenant settings, the audit log); each route says which it needs, and a key without it is answered 403 `insufficient_scope`.\n\nEvery error is a JSON body `{ error: { code, message, issues? } }`: each route lists the statuses and codes it answers, with an example of each. Besides those, any route may answer 500 (`misconfigured`: a secret or variable of the deployment is wrong; `internal`).",
  },
  /** The reference's sections, in this order; each route names its own. */
  tags: [
    { name: "Jobs", description: "Create, change, pause, trigger and backfill jobs; their runs, and why a fire ran or did not." },
    { name: "Runs", description: "Runs and their attempts, retries, dead letters, and the callbacks of long-running targets." },
    { name: "Schedules", description: "What a schedule would fire, before a job has it." },
    { name: "Tenants", description: "Tenants and their limits (admin), and their default notifications." },
    { name: "API keys", description: "A tenant's keys: add one, move clients over, revoke the old one." },
    { name: "Signing keys", description: "The secrets targets verify the Edgecron-Signature-V2 of each request with." },
    { name: "Breakers", description: "The circuit breakers of a tenant's target origins." },
    { name: "Metrics", description: "Scheduler health, as JSON and for Prometheus." },
    { name: "Audit", description: "Every change made through the API: who, when, what, from where." },
  ],
};

app.openAPIRegistry.registerComponent("securitySchemes", "bearer", { type: "http", scheme: "bearer" });
documentScopes(app as never);

/**
 * /openapi.json, public: generated on its first request and kept for the isolate's life, since
 * the routes cannot change while it runs; generating it anew on every unauthenticated request
 * cost a walk of every route's schemas.
 */
let openapiJson: string | undefined;
app.get("/openapi.json", (c) => {
  openapiJson ??= JSON.stringify(app.getOpenAPI31Document(OPENAPI_HEAD));
  return c.body(openapiJson, 200, { "Content-Type": "application/json" });
});
