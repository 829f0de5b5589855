import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { redeliveryDelay } from "../../src/consumer/deliveries";
import type { KeyedDispatch } from "../../src/protocol/queue-messages";
import { DISPATCHES_PER_MESSAGE, packDispatches, QUEUE_BATCH_BYTES, QUEUE_BATCH_MESSAGES } from "../../src/shard/dispatch-packs";

const bytes = (value: unknown) => new TextEncoder().encode(JSON.stringify(value)).length;
/** What the Queue counts for a message: its JSON and up to ~100 bytes of metadata. */
const messageBytes = (value: unknown) => bytes(value) + 100;

const dispatch: fc.Arbitrary<KeyedDispatch> = fc.record(
  {
    runId: fc.string({ minLength: 1, maxLength: 80 }),
    fence: fc.integer({ min: 1, max: 1_000 }),
    // Long tenants and origins (and non-ASCII ones) are what could push a send past 256 KB.
    tenantId: fc.oneof(fc.constant("acme"), fc.string({ maxLength: 300, unit: "grapheme", size: "max" })),
    origin: fc.oneof(fc.constant("https://api.example.com"), fc.string({ maxLength: 300, size: "max" })),
  },
  { requiredKeys: ["runId", "fence"] },
);

describe("packDispatches", () => {
  it("keeps every dispatch once, in order, ten to a message, in sends within the Queues limits and full but at one", () => {
    fc.assert(
      fc.property(fc.array(dispatch, { maxLength: 2_500, size: "max" }), (dispatches) => {
        const batches = packDispatches("shard-3", dispatches);
        const packs = batches.flat();
        expect(packs.flatMap((p) => p.dispatches)).toEqual(dispatches);
        for (const batch of batches) {
          expect(batch.length).toBeGreaterThan(0);
          expect(batch.length).toBeLessThanOrEqual(QUEUE_BATCH_MESSAGES);
          expect(batch.reduce((n, pack) => n + messageBytes(pack), 0)).toBeLessThanOrEqual(QUEUE_BATCH_BYTES);
        }
        packs.forEach((pack, i) => {
          expect(pack.shard).toBe("shard-3");
          // Ten to a message, the last one fewer; ten are far below the 64 KB a message is billed by.
          expect(pack.dispatches.length).toBe(i === packs.length - 1 ? pack.dispatches.length : DISPATCHES_PER_MESSAGE);
          expect(pack.dispatches.length).toBeGreaterThan(0);
          expect(pack.dispatches.length).toBeLessThanOrEqual(DISPATCHES_PER_MESSAGE);
          expect(messageBytes(pack)).toBeLessThanOrEqual(64_000);
        });
        // A send is short of 100 messages only where the next message would pass 256 KB.
        batches.forEach((batch, i) => {
          const next = batches[i + 1]?.[0];
          if (next && batch.length < QUEUE_BATCH_MESSAGES) {
            expect([...batch, next].reduce((n, pack) => n + messageBytes(pack), 0)).toBeGreaterThan(QUEUE_BATCH_BYTES);
          }
        });
      }),
      { numRuns: 40, endOnFailure: true },
    );
  }, 60_000); // 40 runs of up to 2,500 dispatches: seconds on a loaded machine; a time limit here says nothing of the code

  it("sends a thousand ordinary dispatches as one sendBatch of 100 messages", () => {
    const dispatches = Array.from({ length: 1_000 }, (_, i) => ({
      runId: `run_${i}`,
      fence: 1,
      tenantId: "acme",
      origin: "https://api.example.com",
    }));
    const batches = packDispatches("shard-0", dispatches);
    expect(batches.map((b) => b.length)).toEqual([100]);
    expect(batches[0]!.every((p) => p.dispatches.length === 10)).toBe(true);
  });

  it("nothing to send is no send", () => {
    expect(packDispatches("shard-0", [])).toEqual([]);
  });
});

describe("redeliveryDelay", () => {
  it("doubles from 2 s per delivery, up to a minute", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 20].map(redeliveryDelay)).toEqual([2, 4, 8, 16, 32, 60, 60, 60]);
  });
});
