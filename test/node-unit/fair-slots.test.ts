/**
 * The connection slots shared among a batch's tenants (src/consumer/fair-slots.ts), driven on a
 * virtual clock: requests announced at the batch's start, asking for a slot when they arrive,
 * holding it for their duration. What docs/security.md ("Tenants, secrets and targets") promises is checked
 * at every instant: never more than the slots, a tenant's request waits only while its own
 * tenant holds its share, a free slot never idles while a request that has asked waits (unless
 * kept for one still to come), and every request runs.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { FairSlots } from "../../src/consumer/fair-slots";

interface Req {
  tenant: string;
  /** When it asks for a slot (its request prepared). */
  arrive: number;
  duration: number;
  /** It could not be prepared: it never asks. */
  forgo: boolean;
}

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Runs the requests on a virtual clock, checking the promises at every instant; each one's start (or null), and the order they started in. */
async function simulate(size: number, reqs: Req[]): Promise<Array<number | null> & { order: number[] }> {
  const slots = new FairSlots(size);
  for (const r of reqs) slots.expect(r.tenant);
  const tenants = new Set(reqs.map((r) => r.tenant)).size;
  const share = Math.floor(size / tenants);
  const started = Object.assign(
    reqs.map((): number | null => null),
    { order: [] as number[] },
  );
  const waiting = new Set<number>();
  const arrived = new Set<number>();
  let running: Array<{ index: number; end: number; done: () => void }> = [];
  const finished: Promise<unknown>[] = [];
  let now = 0;
  for (;;) {
    await flush();
    const held = new Map<string, number>();
    for (const r of running) held.set(reqs[r.index]!.tenant, (held.get(reqs[r.index]!.tenant) ?? 0) + 1);
    expect(running.length).toBeLessThanOrEqual(size);
    const waitingTenants = new Set([...waiting].map((i) => reqs[i]!.tenant));
    for (const tenant of waitingTenants) {
      const mine = held.get(tenant) ?? 0;
      if (tenants <= size) {
        // Behind its own tenant's attempts only: it holds its share.
        expect(mine, `${tenant} waits at ${now}`).toBeGreaterThanOrEqual(share);
      } else if (mine === 0) {
        // More tenants than slots: nobody holds a second slot while it holds none.
        for (const [other, n] of held) expect(n, `${other} holds a second slot while ${tenant} waits with none`).toBeLessThanOrEqual(1);
      }
    }
    if (waiting.size > 0 && running.length < size) {
      // An idle slot only while some announced request has yet to ask (or forgo).
      expect(reqs.some((_, i) => !arrived.has(i))).toBe(true);
    }
    const nextArrival = Math.min(...reqs.map((r, i) => (arrived.has(i) ? Infinity : r.arrive)));
    const nextEnd = Math.min(...running.map((r) => r.end));
    const at = Math.min(nextArrival, nextEnd);
    if (at === Infinity) break;
    now = at;
    for (const r of running.filter((r) => r.end === now)) r.done();
    running = running.filter((r) => r.end !== now);
    reqs.forEach((r, i) => {
      if (arrived.has(i) || r.arrive !== now) return;
      arrived.add(i);
      if (r.forgo) {
        slots.forgo(r.tenant);
        return;
      }
      waiting.add(i);
      finished.push(
        slots.hold(
          r.tenant,
          () =>
            new Promise<void>((done) => {
              waiting.delete(i);
              started[i] = now;
              started.order.push(i);
              running.push({ index: i, end: now + r.duration, done });
            }),
        ),
      );
    });
  }
  await Promise.all(finished);
  expect(waiting.size).toBe(0);
  return started;
}

const reqArb = (tenants: number) =>
  fc.record({
    tenant: fc.integer({ min: 0, max: tenants - 1 }).map((t) => `t${t}`),
    arrive: fc.integer({ min: 0, max: 5 }),
    duration: fc.integer({ min: 1, max: 900 }),
    forgo: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
  });

describe("connection slots shared fairly among a batch's tenants", () => {
  it("keeps every promise at every instant, and runs every request, whatever the batch", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 10 }).chain((tenants) => fc.array(reqArb(tenants), { minLength: 1, maxLength: 40 })),
        async (size, reqs) => {
          const started = await simulate(size, reqs);
          for (const [i, r] of reqs.entries()) expect(started[i] === null, `request ${i}`).toBe(r.forgo);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("a tenant's fast request starts at once beside another's six slow ones, which get the other five slots", async () => {
    const slow = Array.from({ length: 8 }, () => ({ tenant: "A", arrive: 0, duration: 900, forgo: false }));
    const started = await simulate(6, [...slow, { tenant: "B", arrive: 1, duration: 1, forgo: false }]);
    expect(started.at(-1)).toBe(1);
    expect(started.filter((s) => s === 0)).toHaveLength(5);
    // B done, its slot goes back to A.
    expect(started.filter((s) => s === 2)).toHaveLength(1);
  });

  it("a lone tenant gets every slot, first come first served", async () => {
    const started = await simulate(
      6,
      Array.from({ length: 8 }, (_, i) => ({ tenant: "A", arrive: i, duration: 100, forgo: false })),
    );
    expect([...started]).toEqual([0, 1, 2, 3, 4, 5, 100, 101]);
  });

  it("with more tenants than slots, the slots go round the tenants one each", async () => {
    const reqs = ["A", "A", "A", "B", "C", "D", "E", "F", "G", "H"].map((tenant) => ({ tenant, arrive: 0, duration: 10, forgo: false }));
    const started = await simulate(6, reqs);
    // A's first and five other tenants' at once; then the two tenants not yet served, before A's second.
    expect(started.filter((s) => s === 0)).toHaveLength(6);
    expect(started[0]).toBe(0);
    expect(started.order.slice(6)).toEqual([8, 9, 1, 2]);
  });
});
