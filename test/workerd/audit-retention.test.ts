import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { auditArchiveKey } from "../../src/archive/audit-archive";
import { AUDIT_CHUNK, AUDIT_MIN_RETENTION_DAYS } from "../../src/reconcile/audit-retention";
import { sweep } from "../../src/reconcile/sweep";
import { createTenant } from "./helpers";

/** The audit log's retention (docs/security.md): past it, entries go to the archive and leave D1. */

const DAY = 86_400_000;

async function insertEntries(tenantId: string, ageDays: number, count: number, tag: string): Promise<string[]> {
  const at = Date.now() - ageDays * DAY;
  const ids = Array.from({ length: count }, (_, i) => `aud_${at.toString(36).padStart(9, "0")}${i.toString(36).padStart(4, "0")}${tag}`);
  const rows = ids.map((id) => ({ id, tenantId, at, actor: "key_x", action: "job.patch", subject: "job_x", client: null, change: "{}" }));
  await env.DB.prepare(
    `INSERT INTO audit_log (id, tenant_id, at, actor, action, subject, client, change)
     SELECT value ->> 'id', value ->> 'tenantId', value ->> 'at', value ->> 'actor', value ->> 'action', value ->> 'subject', NULL, value ->> 'change'
     FROM json_each(?)`,
  )
    .bind(JSON.stringify(rows))
    .run();
  return ids;
}

const idsOf = async (tenantId: string) =>
  (await env.DB.prepare("SELECT id FROM audit_log WHERE tenant_id = ? ORDER BY id").bind(tenantId).all<{ id: string }>()).results.map(
    (r) => r.id,
  );

async function archived(tenantId: string): Promise<string[]> {
  const listed = await env.ARCHIVE.list({ prefix: `audit/v1/${tenantId}/` });
  const ids: string[] = [];
  for (const object of listed.objects) {
    const body = await env.ARCHIVE.get(object.key);
    const text = await new Response(body!.body.pipeThrough(new DecompressionStream("gzip"))).text();
    ids.push(
      ...text
        .trim()
        .split("\n")
        .map((line) => (JSON.parse(line) as { id: string }).id),
    );
  }
  return ids.sort();
}

describe("audit retention", () => {
  it("archives and removes what is older than the retention, keeps the rest, and a longer run retention keeps longer", async () => {
    const short = await createTenant();
    const long = await createTenant({ retentionDays: 365 });
    const old = await insertEntries(short.id, AUDIT_MIN_RETENTION_DAYS + 10, 3, "oldaaa");
    const recent = await insertEntries(short.id, AUDIT_MIN_RETENTION_DAYS - 10, 2, "recent");
    const keptLonger = await insertEntries(long.id, AUDIT_MIN_RETENTION_DAYS + 10, 2, "longer");
    await env.DB.prepare("UPDATE sweep_state SET audit_after = ''").run();
    let retired = 0;
    for (let i = 0; i < 5 && (await idsOf(short.id)).some((id) => old.includes(id)); i++) retired += (await sweep(env)).auditRetired;
    expect(retired).toBeGreaterThanOrEqual(old.length);
    const left = await idsOf(short.id);
    expect(left.filter((id) => old.includes(id))).toEqual([]);
    for (const id of recent) expect(left).toContain(id);
    expect(await idsOf(long.id)).toEqual(expect.arrayContaining(keptLonger));
    expect(await archived(short.id)).toEqual(old.sort());
    expect(await archived(long.id)).toEqual([]);
    const at = Date.now() - (AUDIT_MIN_RETENTION_DAYS + 10) * DAY;
    expect(auditArchiveKey(short.id, at, 1, old[0]!)).toMatch(new RegExp(`^audit/v1/${short.id}/\\d{4}/\\d{2}/\\d{2}/1-aud_`));
  });

  it("a backlog larger than a step's chunk goes over several invocations, none over its budget", async () => {
    const t = await createTenant();
    const old = await insertEntries(t.id, AUDIT_MIN_RETENTION_DAYS + 1, AUDIT_CHUNK + 20, "backlg");
    const budget = { d1Queries: 20, shardCalls: 6 };
    let steps = 0;
    // The tenant's own creation is an entry too, a recent one: it stays.
    while ((await idsOf(t.id)).some((id) => old.includes(id))) {
      steps++;
      expect(steps).toBeLessThan(100);
      await sweep(env, budget);
    }
    expect(steps).toBeGreaterThan(1);
    expect((await archived(t.id)).length).toBe(old.length);
    expect(await idsOf(t.id)).toHaveLength(1);
  });
});
