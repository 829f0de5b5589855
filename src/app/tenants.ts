import { ApiError, notFound } from "../api/errors";
import { shardsInUse } from "../catalog/shards";
import {
  getTenant,
  hashKey,
  insertTenant,
  listTenants as listCatalogTenants,
  settingsOf,
  type Tenant,
  type TenantLimits,
  updateTenant,
} from "../catalog/tenants";
import { DEFAULT_MAX_LIVE_MESSAGES } from "../gate/message-quota";
import { newApiKey, newKeyId, newTenantId, TENANT_ID } from "../model/ids";
import type { Notify } from "../model/job";
import { gateStub, shardStub } from "../stubs";
import { audit, entryOf } from "./audit";
import { type Caller, ownsTenant } from "./caller";
import { forgetJobRoom } from "./job-room";
import { forgetTenant } from "./key-cache";
import { acceptNotify } from "./notify";
import { type Page, paged, tenantCursor } from "./pagination";
import { forgetRequests } from "./request-rate";

/** A new tenant's limits unless given: generous, but a runaway client cannot take the whole system. */
const DEFAULT_LIMITS = {
  maxJobs: 10_000,
  maxRunsInFlight: 1_000,
  requestsPerSecond: 100,
  retentionDays: null,
  maxLiveMessages: DEFAULT_MAX_LIVE_MESSAGES,
};

/** Limits as a request gives them: absent keeps the current (or default) value, null means no limit. */
export type LimitsChange = Partial<TenantLimits>;

function requireAdmin(caller: Caller): void {
  if (!caller.admin) throw new ApiError(403, "forbidden", "only the admin token may do this");
}

/** A tenant the caller may see (itself, or any for the admin), or 404 exactly as for an unknown id. */
export async function loadTenant(env: Env, caller: Caller, id: string): Promise<Tenant> {
  const tenant = TENANT_ID.test(id) && ownsTenant(caller, id) ? await getTenant(env.DB, id) : null;
  if (!tenant) throw notFound("tenant", id);
  return tenant;
}

export interface MintedKey {
  id: string;
  /** Shown once: only its hash is stored. */
  apiKey: string;
  hash: string;
  prefix: string;
}

/** What the audit log keeps of a tenant: its settings, as the API shows them. */
const tenantRecord = (t: Tenant) => ({ name: t.name, limits: t.limits, notify: t.notify });

export async function mintKey(): Promise<MintedKey> {
  const apiKey = newApiKey();
  return { id: newKeyId(), apiKey, hash: await hashKey(apiKey), prefix: apiKey.slice(0, 7) };
}

/** A tenant and its first API key (admin only). */
export async function createTenant(
  env: Env,
  caller: Caller,
  input: { name?: string | undefined; limits?: LimitsChange | undefined; notify?: Notify | undefined },
): Promise<{ tenant: Tenant; key: MintedKey }> {
  requireAdmin(caller);
  const id = newTenantId();
  const tenant: Tenant = {
    id,
    name: input.name ?? null,
    limits: { ...DEFAULT_LIMITS, ...input.limits },
    notify: input.notify ? await acceptNotify(env, input.notify, id) : null,
    signingGeneration: 1,
    // A new tenant's targets are written against V2: the first scheme is for those from before it.
    legacySignature: false,
    version: 1,
    createdAt: Date.now(),
  };
  const key = await mintKey();
  const entry = entryOf(caller, {
    tenantId: tenant.id,
    action: "tenant.create",
    subject: tenant.id,
    after: { ...tenantRecord(tenant), keyId: key.id },
  });
  await insertTenant(env.DB, tenant, key, [audit(env.DB, entry)]);
  return { tenant, key };
}

export async function listTenants(env: Env, caller: Caller, query: { limit: number; cursor?: string }): Promise<Page<Tenant>> {
  requireAdmin(caller);
  return paged(tenantCursor, query, (limit, after) => listCatalogTenants(env.DB, limit, after));
}

/**
 * Changes a tenant's limits (the admin only) and its default notifications (the admin, or the
 * tenant itself: they are its own business). `notify` null takes the default away.
 */
export async function changeTenant(
  env: Env,
  caller: Caller,
  id: string,
  change: { limits?: LimitsChange | undefined; notify?: Notify | null | undefined },
): Promise<Tenant> {
  if (change.limits !== undefined) requireAdmin(caller);
  const before = await loadTenant(env, caller, id);
  const notify = change.notify ? await acceptNotify(env, change.notify, id) : change.notify;
  const entry = entryOf(caller, {
    tenantId: id,
    action: "tenant.update",
    subject: id,
    before: tenantRecord(before),
    after: { ...(change.limits !== undefined && { limits: change.limits }), ...(notify !== undefined && { notify }) },
  });
  const tenant = await updateTenant(
    env.DB,
    id,
    { ...(change.limits !== undefined && { limits: change.limits }), ...(notify !== undefined && { notify }) },
    [audit(env.DB, entry, { ifChanged: true })],
  );
  if (!tenant) throw notFound("tenant", id);
  await pushSettings(env, tenant);
  if (change.limits?.maxJobs != null) await recountJobs(env, tenant);
  return tenant;
}

/**
 * A tenant's quota set or changed: its gate counts again before the answer, so the quota holds
 * for every creation after it, on whatever isolate (the leases granted before no longer
 * insert: src/gate/job-count.ts). Should the gate be unreachable, the first creation that reaches
 * it with the changed tenant makes it count.
 */
async function recountJobs(env: Env, tenant: Tenant): Promise<void> {
  try {
    await gateStub(env, tenant.id).quotaChanged(tenant.id, tenant.limits.maxJobs!, tenant.version);
  } catch (err) {
    console.error(`tenant ${tenant.id}: its gate did not count its jobs after its quota changed`, err);
  }
}

/**
 * Hands a tenant's new settings to every shard holding its jobs, and to this isolate's requests
 * (its keys remembered here are looked up again: src/app/key-cache.ts; the blocks of its request
 * rate and room it holds, and refusals of them, are forgotten). A shard that cannot be reached
 * now gets them from the next sweep; signatures stay verifiable meanwhile, because every request
 * is signed with the current and the next secret.
 */
export async function pushSettings(env: Env, tenant: Tenant): Promise<void> {
  forgetTenant(tenant.id);
  forgetRequests(tenant.id);
  forgetJobRoom(tenant.id);
  const shards = await shardsInUse(env.DB, tenant.id);
  const results = await Promise.allSettled(shards.map((s) => shardStub(env, s).applyTenants([settingsOf(tenant)])));
  const failed = results.filter((r) => r.status === "rejected").length;
  if (failed > 0) console.error(`tenant ${tenant.id}: ${failed} of ${shards.length} shards did not take its new settings; the sweep will`);
}
