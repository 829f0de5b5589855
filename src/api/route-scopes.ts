import type { Scope } from "../model/scopes";

/**
 * What every route needs, in one table, keyed by method and route path as the route table has
 * them (`GET /v1/jobs/:id`; src/api/operation.ts). A route missing here is refused to every
 * caller (fail closed), and test/workerd/route-scopes.test.ts walks /openapi.json to prove
 * that none is missing and that a lower scope is refused.
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
};

export const accessOf = (endpoint: { method: string; path: string }): RouteAccess | undefined =>
  ROUTE_SCOPES[`${endpoint.method} ${endpoint.path}`];
