import { deleteTopicRow, type Endpoint, getTopicRow, listTopicRows, putTopicRow, type TopicRow } from "../../catalog/qstash";
import { QstashInputError } from "../../qstash/errors";
import { openEndpoints, sealEndpoints } from "../../qstash/sealed-urls";
import { audit, entryOf } from "../audit";
import type { Caller } from "../caller";
import { tenantOf } from "./tenant";

/**
 * URL groups (/v2/topics) as their callers see them: their endpoints opened; sealed as they are
 * written, each change with its audit entry in the same D1 batch. A group is configuration: an
 * endpoint added receives every later message to the group, forwarded credentials included, so
 * who added which is the log's to say (docs/security.md).
 */

export const MAX_ENDPOINTS = 100;

export async function readUrlGroup(env: Env, tenantId: string, name: string): Promise<TopicRow | null> {
  const row = await getTopicRow(env.DB, tenantId, name);
  return row && { ...row, endpoints: await openEndpoints(env.ENCRYPTION_KEYS, row.endpoints, tenantId, name) };
}

export async function listUrlGroups(env: Env, tenantId: string): Promise<TopicRow[]> {
  const rows = await listTopicRows(env.DB, tenantId);
  return Promise.all(
    rows.map(async (row) => ({ ...row, endpoints: await openEndpoints(env.ENCRYPTION_KEYS, row.endpoints, tenantId, row.name) })),
  );
}

/**
 * What the log keeps of an endpoint: its name and its URL's origin. The URL is sealed at rest
 * like a job's target, whose entries keep its origin too: a path or query may hold a token.
 */
function endpointRecord(e: Partial<Endpoint>) {
  let origin: string | undefined;
  try {
    origin = e.url === undefined ? undefined : new URL(e.url).origin;
  } catch {
    origin = undefined;
  }
  return { ...(e.name !== undefined && { name: e.name }), ...(origin !== undefined && { origin }) };
}

const records = (endpoints: Array<Partial<Endpoint>>) => endpoints.map(endpointRecord);

async function write(
  env: Env,
  caller: Caller,
  name: string,
  endpoints: Endpoint[],
  change: { action: string; before: unknown; after: unknown },
): Promise<void> {
  const tenantId = tenantOf(caller);
  const entry = entryOf(caller, { tenantId, subject: name, ...change });
  await putTopicRow(env.DB, tenantId, name, await sealEndpoints(env.ENCRYPTION_KEYS, endpoints, tenantId, name), Date.now(), [
    audit(env.DB, entry, { ifChanged: true }),
  ]);
}

/** Adds endpoints to a group (made if there is none); one with the URL or name of one there replaces it. */
export async function addEndpoints(env: Env, caller: Caller, name: string, added: Endpoint[]): Promise<void> {
  const current = await readUrlGroup(env, tenantOf(caller), name);
  const merged: Endpoint[] = [...(current?.endpoints ?? [])];
  for (const e of added) {
    const at = merged.findIndex((m) => m.url === e.url || (e.name !== undefined && m.name === e.name));
    if (at >= 0) merged[at] = e;
    else merged.push(e);
  }
  if (merged.length > MAX_ENDPOINTS) throw new QstashInputError("endpoints", `a URL group has at most ${MAX_ENDPOINTS} endpoints`);
  await write(env, caller, name, merged, {
    action: "urlgroup.endpoints.add",
    before: current && { endpoints: records(current.endpoints) },
    after: { added: records(added), endpoints: records(merged) },
  });
}

/** Removes the endpoints named by URL or name; false: there is no such group. */
export async function removeEndpoints(env: Env, caller: Caller, name: string, removed: Array<Partial<Endpoint>>): Promise<boolean> {
  const current = await readUrlGroup(env, tenantOf(caller), name);
  if (!current) return false;
  const goes = (e: Endpoint) =>
    removed.some((r) => (r.url !== undefined && r.url === e.url) || (r.name !== undefined && r.name === e.name));
  const kept = current.endpoints.filter((e) => !goes(e));
  await write(env, caller, name, kept, {
    action: "urlgroup.endpoints.remove",
    before: { endpoints: records(current.endpoints) },
    after: { removed: records(current.endpoints.filter(goes)), endpoints: records(kept) },
  });
  return true;
}

/** Deletes a group; false: there is none. */
export async function deleteUrlGroup(env: Env, caller: Caller, name: string): Promise<boolean> {
  const tenantId = tenantOf(caller);
  const current = await readUrlGroup(env, tenantId, name);
  if (!current) return false;
  const entry = entryOf(caller, {
    tenantId,
    action: "urlgroup.delete",
    subject: name,
    before: { endpoints: records(current.endpoints) },
    after: null,
  });
  return deleteTopicRow(env.DB, tenantId, name, [audit(env.DB, entry, { ifChanged: true })]);
}
