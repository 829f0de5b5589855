import type { Scope } from "../model/scopes";

/**
 * What every route needs, in one table, keyed by method and route path as the route table has
 * them (`GET /v1/jobs/:id`; src/api/operation.ts). A route missing here is refused to every
 * caller (fail closed), and test/workerd/route-scopes.test.ts walks /openapi.json and the /v2
 * app's route table to prove that none is missing and that a lower scope is refused.
 *
 * `perJob`: the route touches only jobs it names (or lists only those a key may see), each
 * checked against a key's job prefix. A route that is not per job reads or changes the tenant
 * as a whole (its metrics, its dead letters, its keys…), so a key limited to a prefix of job
 * names is refused it: it would otherwise see the other jobs' runs.
 */
export type RouteAccess = { scope: Scope; perJob: boolean } | "completion-token";

const read = { scope: "read", perJob: true } as const;
const readTenant = { scope: "read", perJob: false } as const;
const write = { scope: "write", perJob: true } as const;
const admin = { scope: "admin", perJob: false } as const;
// The /v2 (QStash) surface's: none is per job, since its messages, schedules and queues are not
// named jobs, so a key limited to a job prefix is refused every one (auth.ts, authorizeQstash).
const qstashRead = { scope: "read", perJob: false } as const;
const qstashWrite = { scope: "write", perJob: false } as const;

export const ROUTE_SCOPES: Readonly<Record<string, RouteAccess>> = {
  "POST /v1/jobs": write,
  "POST /v1/jobs/batch": write,
  "GET /v1/jobs": read,
  "GET /v1/jobs/:id": read,
  "PATCH /v1/jobs/:id": write,
  "DELETE /v1/jobs/:id": write,
  "POST /v1/jobs/:id/pause": write,
  "POST /v1/jobs/:id/resume": write,
  "POST /v1/jobs/:id/trigger": write,
  "POST /v1/jobs/:id/backfill": write,
  "GET /v1/jobs/:id/runs": read,
  "GET /v1/jobs/:id/explain": read,
  "GET /v1/jobs/:id/history": read,
  "GET /v1/runs/:id": read,
  "POST /v1/runs/:id/retry": write,
  // A long-running target holds its run's completion token, not an API key.
  "POST /v1/runs/:id/complete": "completion-token",
  "POST /v1/runs/:id/heartbeat": "completion-token",
  "GET /v1/dead-letters": readTenant,
  // Reads no data of the tenant at all: what a schedule would fire.
  "POST /v1/schedules/preview": read,
  "GET /v1/metrics": readTenant,
  "GET /metrics": readTenant,
  "GET /v1/breakers": readTenant,
  "GET /v1/me": read,
  "GET /v1/tenants/:id": readTenant,
  "POST /v1/tenants": admin,
  "GET /v1/tenants": admin,
  "PATCH /v1/tenants/:id": admin,
  "POST /v1/tenants/:id/keys": admin,
  "GET /v1/tenants/:id/keys": admin,
  "DELETE /v1/tenants/:id/keys/:keyId": admin,
  "GET /v1/signing-keys": admin,
  "PATCH /v1/signing-keys": admin,
  "POST /v1/signing-keys/rotate": admin,
  "GET /v1/audit": admin,
  // /v2, as its Hono routes are registered (src/api/qstash/app.ts); its signing keys are the
  // tenant's, as /v1/signing-keys shows them, so they need what those need.
  "POST /v2/publish/*": qstashWrite,
  "POST /v2/enqueue/:queue/*": qstashWrite,
  "POST /v2/batch": qstashWrite,
  "GET /v2/schedules": qstashRead,
  "GET /v2/schedules/:id": qstashRead,
  "POST /v2/schedules/*": qstashWrite,
  "DELETE /v2/schedules/:id": qstashWrite,
  "PATCH /v2/schedules/:id/pause": qstashWrite,
  "POST /v2/schedules/:id/pause": qstashWrite,
  "PATCH /v2/schedules/:id/resume": qstashWrite,
  "POST /v2/schedules/:id/resume": qstashWrite,
  "GET /v2/messages/:id": qstashRead,
  "DELETE /v2/messages/:id": qstashWrite,
  "DELETE /v2/messages": qstashWrite,
  "GET /v2/dlq": qstashRead,
  "GET /v2/dlq/:id": qstashRead,
  "DELETE /v2/dlq/:id": qstashWrite,
  "DELETE /v2/dlq": qstashWrite,
  "POST /v2/dlq/retry": qstashWrite,
  "GET /v2/keys": admin,
  "POST /v2/keys/rotate": admin,
  "POST /v2/queues": qstashWrite,
  "GET /v2/queues": qstashRead,
  "GET /v2/queues/:name": qstashRead,
  "DELETE /v2/queues/:name": qstashWrite,
  "POST /v2/queues/:name/pause": qstashWrite,
  "POST /v2/queues/:name/resume": qstashWrite,
  "POST /v2/topics/:name/endpoints": qstashWrite,
  "DELETE /v2/topics/:name/endpoints": qstashWrite,
  "GET /v2/topics": qstashRead,
  "GET /v2/topics/:name": qstashRead,
  "DELETE /v2/topics/:name": qstashWrite,
  "GET /v2/events": qstashRead,
};

export const accessOf = (endpoint: { method: string; path: string }): RouteAccess | undefined =>
  ROUTE_SCOPES[`${endpoint.method} ${endpoint.path}`];
