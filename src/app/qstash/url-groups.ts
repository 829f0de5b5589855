import { deleteTopicRow, type Endpoint, getTopicRow, listTopicRows, putTopicRow, type TopicRow } from "../../catalog/qstash";
import { openEndpoints, sealEndpoints } from "../../qstash/sealed-urls";

/** URL groups (/v2/topics) as their callers see them: their endpoints opened; sealed as they are written. */

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

export async function writeUrlGroup(env: Env, tenantId: string, name: string, endpoints: Endpoint[], now: number): Promise<void> {
  await putTopicRow(env.DB, tenantId, name, await sealEndpoints(env.ENCRYPTION_KEYS, endpoints, tenantId, name), now);
}

export const deleteUrlGroup = (env: Env, tenantId: string, name: string) => deleteTopicRow(env.DB, tenantId, name);
