import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { newJobId } from "../../src/model/ids";
import type { OpenResult } from "../../src/protocol/shard-rpc";
import { sealTarget } from "../../src/security/targets";
import { OPEN_ANSWER_BYTES } from "../../src/shard/completion";
import { DUE_PAGE_BYTES } from "../../src/shard/fired-through";
import type { Shard } from "../../src/shard/shard";
import { FAR_CRON, receiverPath, specLike } from "./helpers";

const MIB = 1024 * 1024;

/** Measured on the shard as it works: the most of jobs' specs one statement read, and the most of orders one `open` answered (as JSON). */
interface Reads {
  largestSpecs: number;
  largestOpen: number;
}

describe("batches bounded by bytes, not items", () => {
  it("60 messages of 1 MiB due at once are all delivered, each alarm's read of them and each `open` answer within its bound", async () => {
    const stub = env.SHARD.get(env.SHARD.idFromName(`large-${crypto.randomUUID()}`));
    const url = receiverPath("large");
    const template = await specLike(FAR_CRON, url);
    const body = "x".repeat(MIB);
    const now = Date.now();
    const defs = await Promise.all(
      Array.from({ length: 60 }, async () => {
        const id = newJobId(now);
        const target = await sealTarget(env.ENCRYPTION_KEYS, { url, method: "POST", body }, id);
        return { id, tenantId: "default", version: 1, spec: { ...template, target }, paused: false, deleted: false, createdAt: now };
      }),
    );
    for (let i = 0; i < defs.length; i += 10) await stub.applyJobs(defs.slice(i, i + 10));

    await runInDurableObject(stub, async (shard: Shard, state) => {
      const sql = state.storage.sql;
      const reads: Reads = { largestSpecs: 0, largestOpen: 0 };
      (globalThis as { largeReads?: Reads }).largeReads = reads;
      // Every statement's rows, as the shard takes them: the specs' lengths one statement returned.
      const exec = sql.exec.bind(sql);
      sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        const toArray = cursor.toArray.bind(cursor);
        let specs = 0;
        const note = (row: Record<string, unknown>) => {
          if (typeof row.spec === "string") specs += row.spec.length;
          reads.largestSpecs = Math.max(reads.largestSpecs, specs);
          return row;
        };
        return Object.assign(cursor, {
          toArray: () => toArray().map(note),
          one: () => note(toArray()[0] as Record<string, unknown>),
        });
      }) as typeof sql.exec;
      const completions = (shard as unknown as { completions: { open: (d: unknown) => OpenResult[] } }).completions;
      const open = completions.open.bind(completions);
      completions.open = (d) => {
        const answer = open(d);
        const orders = answer.filter((a) => a.result === "open").map(({ result: _, ...order }) => JSON.stringify(order).length);
        reads.largestOpen = Math.max(
          reads.largestOpen,
          orders.reduce((a, b) => a + b, 0),
        );
        return answer;
      };
      const due = Date.now() - 1;
      sql.exec(
        `UPDATE jobs SET next_fire_at = ?1, next_due_at = ?1 WHERE id IN (${defs.map(() => "?").join(",")})`,
        due,
        ...defs.map((d) => d.id),
      );
      await state.storage.setAlarm(due);
    });
    // The first alarm; each re-arms for the jobs still due, and the runtime runs those itself.
    await runDurableObjectAlarm(stub);

    const sizes = async () => {
      const name = new URL(url).pathname.split("/")[2];
      return (await (await fetch(`${env.RECEIVER_URL}/sizes/${name}`)).json()) as Array<{ key: string; bytes: number }>;
    };
    await expect.poll(async () => (await sizes()).length, { timeout: 50_000, interval: 500 }).toBe(60);
    const got = await sizes();
    expect(new Set(got.map((h) => h.key)).size).toBe(60);
    expect(got.every((h) => h.bytes === MIB)).toBe(true);

    const reads = await runInDurableObject(stub, () => (globalThis as { largeReads?: Reads }).largeReads!);
    // A sealed 1 MiB body is 1.4 MB: a page holds two of them, never the 84 MB of all 60.
    expect(reads.largestSpecs).toBeGreaterThan(MIB);
    expect(reads.largestSpecs).toBeLessThanOrEqual(DUE_PAGE_BYTES);
    expect(reads.largestOpen).toBeGreaterThan(MIB);
    expect(reads.largestOpen).toBeLessThanOrEqual(OPEN_ANSWER_BYTES);
    const runs = await runInDurableObject(stub, (_s: Shard, state) =>
      state.storage.sql.exec("SELECT state, COUNT(*) AS n FROM runs GROUP BY state").toArray(),
    );
    expect(runs).toEqual([{ state: "succeeded", n: 60 }]);
  }, 90_000);
});
