import type { Sealed } from "../security/sealing";
import { guard } from "./d1";

/** The /v2 (QStash) surface's tables (migrations/0014_qstash.sql); every call is scoped to one tenant. */

export interface ScheduleRow {
  scheduleId: string;
  jobId: string;
  createdAt: number;
}

export interface QueueRow {
  name: string;
  parallelism: number;
  paused: boolean;
  createdAt: number;
  updatedAt: number;
}

export interface Endpoint {
  name?: string;
  url: string;
}

export interface TopicRow {
  name: string;
  endpoints: Endpoint[];
  createdAt: number;
  updatedAt: number;
}

/**
 * A URL group as stored: its endpoints sealed (src/qstash/sealed-urls.ts); a group written
 * before endpoints were sealed holds them in clear until the sweep seals them.
 */
export type StoredTopicRow = Omit<TopicRow, "endpoints"> & { endpoints: Endpoint[] | Sealed };

type Row = Record<string, unknown>;

const all = async (what: string, stmt: D1PreparedStatement) => (await guard(what, () => stmt.all<Row>())).results;
const run = (what: string, stmt: D1PreparedStatement) => guard(what, () => stmt.run());
/** A change and `also` (its audit entry) in one batch, a transaction; the change's result. */
const runWith = async (what: string, db: D1Database, stmt: D1PreparedStatement, also: D1PreparedStatement[]) =>
  also.length === 0 ? run(what, stmt) : (await guard(what, () => db.batch([stmt, ...also])))[0]!;

// ---- schedules ----

const toSchedule = (r: Row): ScheduleRow => ({
  scheduleId: r.schedule_id as string,
  jobId: r.job_id as string,
  createdAt: r.created_at as number,
});

export async function getScheduleRow(db: D1Database, tenantId: string, scheduleId: string): Promise<ScheduleRow | null> {
  const rows = await all(
    "read schedule",
    db.prepare("SELECT * FROM qstash_schedules WHERE tenant_id = ? AND schedule_id = ?").bind(tenantId, scheduleId),
  );
  return rows[0] ? toSchedule(rows[0]) : null;
}

export async function listScheduleRows(db: D1Database, tenantId: string): Promise<ScheduleRow[]> {
  const rows = await all(
    "list schedules",
    db.prepare("SELECT * FROM qstash_schedules WHERE tenant_id = ? ORDER BY created_at DESC").bind(tenantId),
  );
  return rows.map(toSchedule);
}

/**
 * The schedule now runs as `jobId`, if its id still names `expected` (null: no row yet): a
 * compare-and-set, so that of concurrent upserts each moves the id from the job it read, never
 * from one it did not see. Its creation time stays that of its first version. `also` (the audit
 * entry, `ifChanged`) joins its batch. Whether it moved.
 */
export async function putScheduleRow(
  db: D1Database,
  tenantId: string,
  scheduleId: string,
  jobId: string,
  expected: string | null,
  now: number,
  also: D1PreparedStatement[] = [],
): Promise<boolean> {
  const stmt =
    expected === null
      ? db
          .prepare(
            `INSERT INTO qstash_schedules (tenant_id, schedule_id, job_id, created_at) VALUES (?, ?, ?, ?)
             ON CONFLICT (tenant_id, schedule_id) DO NOTHING`,
          )
          .bind(tenantId, scheduleId, jobId, now)
      : db
          .prepare("UPDATE qstash_schedules SET job_id = ? WHERE tenant_id = ? AND schedule_id = ? AND job_id = ?")
          .bind(jobId, tenantId, scheduleId, expected);
  const result = await runWith("write schedule", db, stmt, also);
  return (result.meta.changes ?? 0) > 0;
}

/**
 * Live jobs of QStash schedules after `after`, by id, a page of them (the partial index
 * jobs_qstash_schedules), each with whether its schedule id names it and when it was made.
 */
export async function scheduleJobsAfter(
  db: D1Database,
  after: string,
  limit: number,
): Promise<Array<{ id: string; tenantId: string; createdAt: number; named: boolean; scheduleId: string | null }>> {
  const rows = await all(
    "read schedule jobs",
    db
      .prepare(
        `SELECT j.id, j.tenant_id, j.created_at, json_extract(j.spec, '$.target.qstash.scheduleId') AS schedule_id,
           EXISTS (SELECT 1 FROM qstash_schedules s WHERE s.tenant_id = j.tenant_id AND s.schedule_id = substr(j.name, 17) AND s.job_id = j.id) AS named
         FROM jobs j WHERE j.name LIKE 'qstash schedule %' AND j.deleted_at IS NULL AND j.id > ?1 ORDER BY j.id LIMIT ?2`,
      )
      .bind(after, limit),
  );
  return rows.map((r) => ({
    id: r.id as string,
    tenantId: r.tenant_id as string,
    createdAt: r.created_at as number,
    named: r.named === 1,
    scheduleId: (r.schedule_id as string | null) ?? null,
  }));
}

export async function deleteScheduleRow(
  db: D1Database,
  tenantId: string,
  scheduleId: string,
  also: D1PreparedStatement[] = [],
): Promise<void> {
  await runWith(
    "delete schedule",
    db,
    db.prepare("DELETE FROM qstash_schedules WHERE tenant_id = ? AND schedule_id = ?").bind(tenantId, scheduleId),
    also,
  );
}

// ---- deduplication ----

/** A deduplication id as reserved: the messages it names, the first one's URL (sealed), whether they were made. */
export interface DedupReservation {
  /** This call's reservation: none held the id within its window. */
  won: boolean;
  messageIds: string[];
  url: string;
  /** The messages were handed to their shards. Until then a later call makes them itself, under the same ids. */
  made: boolean;
}

/**
 * Expired reservations removed per reserving call, besides a few per id it reserves: the
 * oldest first by the index on expires_at, so that a tenant's publishes remove more than they
 * add and the table holds about one window of ids.
 */
const EXPIRED_PER_CALL = 100;

/**
 * Reserves each entry's id, unless a live reservation holds it, and answers every id's
 * reservation; one transaction, so that of concurrent calls with one id exactly one wins (the
 * upsert takes over only a reservation past its window). Expired reservations are removed in the
 * same batch, by a bounded range of the expiry index.
 */
export async function reserveDedup(
  db: D1Database,
  tenantId: string,
  entries: Array<{ dedupId: string; messageIds: string[]; url: string }>,
  expiresAt: number,
  now: number,
): Promise<Map<string, DedupReservation>> {
  if (entries.length === 0) return new Map();
  const json = JSON.stringify(entries.map((e) => ({ d: e.dedupId, m: e.messageIds[0], ms: e.messageIds, u: e.url })));
  const ids = JSON.stringify(entries.map((e) => e.dedupId));
  const [, reserved, rows] = await guard("reserve dedup", () =>
    db.batch<Row>([
      db
        .prepare(
          `DELETE FROM qstash_dedup WHERE (tenant_id, dedup_id) IN
             (SELECT tenant_id, dedup_id FROM qstash_dedup WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`,
        )
        .bind(now, EXPIRED_PER_CALL + 2 * entries.length),
      db
        .prepare(
          `INSERT INTO qstash_dedup (tenant_id, dedup_id, message_id, message_ids, url, expires_at, made)
           SELECT ?1, json_extract(j.value, '$.d'), json_extract(j.value, '$.m'), json_extract(j.value, '$.ms'), json_extract(j.value, '$.u'), ?2, 0
           FROM json_each(?3) AS j WHERE true
           ON CONFLICT (tenant_id, dedup_id) DO UPDATE SET message_id = excluded.message_id, message_ids = excluded.message_ids,
             url = excluded.url, expires_at = excluded.expires_at, made = 0
           WHERE qstash_dedup.expires_at <= ?4
           RETURNING dedup_id`,
        )
        .bind(tenantId, expiresAt, json, now),
      db
        .prepare(
          `SELECT dedup_id, message_id, message_ids, url, made FROM qstash_dedup
           WHERE tenant_id = ?1 AND dedup_id IN (SELECT value FROM json_each(?2))`,
        )
        .bind(tenantId, ids),
    ]),
  );
  const won = new Set(reserved!.results.map((r) => r.dedup_id as string));
  return new Map(
    rows!.results.map((r) => [
      r.dedup_id as string,
      {
        won: won.has(r.dedup_id as string),
        messageIds: r.message_ids === null ? [r.message_id as string] : (JSON.parse(r.message_ids as string) as string[]),
        url: r.url as string,
        made: r.made === 1,
      },
    ]),
  );
}

/** The reservations' messages were handed to their shards: later calls answer with them. */
export async function confirmDedup(db: D1Database, tenantId: string, dedupIds: string[]): Promise<void> {
  if (dedupIds.length === 0) return;
  await guard("confirm dedup", () =>
    db
      .prepare("UPDATE qstash_dedup SET made = 1 WHERE tenant_id = ?1 AND dedup_id IN (SELECT value FROM json_each(?2))")
      .bind(tenantId, JSON.stringify(dedupIds))
      .run(),
  );
}

/** Removes up to `limit` reservations past their window, the oldest first (the sweep's share: publishes remove their own). */
export async function expireDedup(db: D1Database, now: number, limit: number): Promise<number> {
  const result = await guard("expire dedup", () =>
    db
      .prepare(
        `DELETE FROM qstash_dedup WHERE (tenant_id, dedup_id) IN
           (SELECT tenant_id, dedup_id FROM qstash_dedup WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)`,
      )
      .bind(now, limit)
      .run(),
  );
  return result.meta.changes ?? 0;
}

// ---- queues ----

const toQueue = (r: Row): QueueRow => ({
  name: r.name as string,
  parallelism: r.parallelism as number,
  paused: r.paused === 1,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export async function getQueueRow(db: D1Database, tenantId: string, name: string): Promise<QueueRow | null> {
  const rows = await all("read queue", db.prepare("SELECT * FROM qstash_queues WHERE tenant_id = ? AND name = ?").bind(tenantId, name));
  return rows[0] ? toQueue(rows[0]) : null;
}

export async function listQueueRows(db: D1Database, tenantId: string): Promise<QueueRow[]> {
  return (await all("list queues", db.prepare("SELECT * FROM qstash_queues WHERE tenant_id = ? ORDER BY name").bind(tenantId))).map(
    toQueue,
  );
}

export async function upsertQueueRow(
  db: D1Database,
  tenantId: string,
  name: string,
  set: { parallelism?: number; paused?: boolean },
  now: number,
  also: D1PreparedStatement[] = [],
) {
  await runWith(
    "write queue",
    db,
    db
      .prepare(
        `INSERT INTO qstash_queues (tenant_id, name, parallelism, paused, created_at, updated_at) VALUES (?1, ?2, COALESCE(?3, 1), COALESCE(?4, 0), ?5, ?5)
         ON CONFLICT (tenant_id, name) DO UPDATE SET parallelism = COALESCE(?3, parallelism), paused = COALESCE(?4, paused), updated_at = ?5`,
      )
      .bind(tenantId, name, set.parallelism ?? null, set.paused === undefined ? null : set.paused ? 1 : 0, now),
    also,
  );
}

export async function deleteQueueRow(db: D1Database, tenantId: string, name: string, also: D1PreparedStatement[] = []): Promise<boolean> {
  const result = await runWith(
    "delete queue",
    db,
    db.prepare("DELETE FROM qstash_queues WHERE tenant_id = ? AND name = ?").bind(tenantId, name),
    also,
  );
  return result.meta.changes > 0;
}

// ---- URL groups ----

const toTopic = (r: Row): StoredTopicRow => ({
  name: r.name as string,
  endpoints: JSON.parse(r.endpoints as string) as Endpoint[] | Sealed,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
});

export async function getTopicRow(db: D1Database, tenantId: string, name: string): Promise<StoredTopicRow | null> {
  const rows = await all("read url group", db.prepare("SELECT * FROM qstash_topics WHERE tenant_id = ? AND name = ?").bind(tenantId, name));
  return rows[0] ? toTopic(rows[0]) : null;
}

export async function listTopicRows(db: D1Database, tenantId: string): Promise<StoredTopicRow[]> {
  return (await all("list url groups", db.prepare("SELECT * FROM qstash_topics WHERE tenant_id = ? ORDER BY name").bind(tenantId))).map(
    toTopic,
  );
}

export async function putTopicRow(
  db: D1Database,
  tenantId: string,
  name: string,
  endpoints: Sealed,
  now: number,
  also: D1PreparedStatement[] = [],
): Promise<void> {
  await runWith(
    "write url group",
    db,
    db
      .prepare(
        `INSERT INTO qstash_topics (tenant_id, name, endpoints, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT (tenant_id, name) DO UPDATE SET endpoints = excluded.endpoints, updated_at = ?4`,
      )
      .bind(tenantId, name, JSON.stringify(endpoints), now),
    also,
  );
}

/** A URL group's endpoints in clear (written before they were sealed), or sealed under another key than `?1`. */
const ENDPOINTS_SEALED_UNDER_ANOTHER_KEY = "json_type(endpoints) = 'array' OR json_extract(endpoints, '$.kid') != ?1";

/** URL groups, of every tenant, whose endpoints the re-seal after a key rotation has left (src/reconcile/resealing.ts). */
export async function topicsSealedUnderAnotherKey(
  db: D1Database,
  kid: string,
  limit: number,
): Promise<Array<StoredTopicRow & { tenantId: string }>> {
  const rows = await all(
    "url groups sealed under another key",
    db
      .prepare(`SELECT * FROM qstash_topics WHERE ${ENDPOINTS_SEALED_UNDER_ANOTHER_KEY} ORDER BY tenant_id, name LIMIT ?2`)
      .bind(kid, limit),
  );
  return rows.map((r) => ({ ...toTopic(r), tenantId: r.tenant_id as string }));
}

export async function countTopicsSealedUnderAnotherKey(db: D1Database, kid: string): Promise<number> {
  const rows = await all(
    "count url groups sealed under another key",
    db.prepare(`SELECT COUNT(*) AS n FROM qstash_topics WHERE ${ENDPOINTS_SEALED_UNDER_ANOTHER_KEY}`).bind(kid),
  );
  return (rows[0]?.n as number | undefined) ?? 0;
}

/** Replaces a URL group's endpoints with `sealed`, if they are still `was` (a change made meanwhile wins). */
export async function resealTopicRow(db: D1Database, tenantId: string, topic: StoredTopicRow, sealed: Sealed): Promise<boolean> {
  const result = await run(
    "reseal url group",
    db
      .prepare("UPDATE qstash_topics SET endpoints = ? WHERE tenant_id = ? AND name = ? AND endpoints = ?")
      .bind(JSON.stringify(sealed), tenantId, topic.name, JSON.stringify(topic.endpoints)),
  );
  return result.meta.changes > 0;
}

export async function deleteTopicRow(db: D1Database, tenantId: string, name: string, also: D1PreparedStatement[] = []): Promise<boolean> {
  const result = await runWith(
    "delete url group",
    db,
    db.prepare("DELETE FROM qstash_topics WHERE tenant_id = ? AND name = ?").bind(tenantId, name),
    also,
  );
  return result.meta.changes > 0;
}

// ---- dead letters deleted through /v2 ----

export async function removedDeadLetters(db: D1Database, runIds: string[]): Promise<Set<string>> {
  if (runIds.length === 0) return new Set();
  const rows = await all(
    "read removed dead letters",
    db.prepare("SELECT run_id FROM qstash_dlq_removed WHERE run_id IN (SELECT value FROM json_each(?1))").bind(JSON.stringify(runIds)),
  );
  return new Set(rows.map((r) => r.run_id as string));
}

/**
 * Marks dead letters deleted, each followed in the one batch by its `also` (its audit entry,
 * written only if it was not deleted already: `ifChanged`); answers how many were not already.
 */
export async function removeDeadLetters(
  db: D1Database,
  entries: Array<{ tenantId: string; runId: string; also?: D1PreparedStatement }>,
  now: number,
): Promise<number> {
  if (entries.length === 0) return 0;
  const stmt = db.prepare("INSERT INTO qstash_dlq_removed (tenant_id, run_id, removed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING");
  const removals = entries.map((e) => stmt.bind(e.tenantId, e.runId, now));
  const statements = entries.flatMap((e, i) => [removals[i]!, ...(e.also ? [e.also] : [])]);
  const results = await guard("remove dead letters", () => db.batch(statements));
  const ofRemovals = new Set(removals);
  return results.reduce((n, r, i) => n + (ofRemovals.has(statements[i]!) ? r.meta.changes : 0), 0);
}

/** A retried dead letter that fails again is a dead letter again. */
export async function restoreDeadLetters(db: D1Database, runIds: string[]): Promise<void> {
  if (runIds.length === 0) return;
  await run(
    "restore dead letters",
    db.prepare("DELETE FROM qstash_dlq_removed WHERE run_id IN (SELECT value FROM json_each(?1))").bind(JSON.stringify(runIds)),
  );
}
