import { BASE_COOLDOWN_MS, countsAsFailure } from "../gate/breaker";
import type { KeyedDispatch, Outcome } from "../protocol/queue-messages";
import { gateStub, shardStub } from "../stubs";
import type { Delivery } from "./deliveries";

/** A dispatch the breaker of its origin holds back, and until when. */
export interface Held {
  delivery: Delivery;
  until: number;
  reason: string;
}

const keyOf = (tenantId: string, origin: string) => `${tenantId} ${origin}`;

/**
 * Asks the tenants' gates, one call per tenant in the batch, how many of the batch's dispatches
 * may call each origin now (src/gate/breaker.ts). The others are held: their targets are not called, so
 * no attempt is spent on an origin known to be down. A gate that cannot be asked holds nothing.
 */
export async function screenDispatches(env: Env, deliveries: Delivery[]): Promise<{ go: Delivery[]; held: Held[] }> {
  const keyed = deliveries.filter((d) => d.dispatch.tenantId !== undefined && d.dispatch.origin !== undefined);
  if (keyed.length === 0) return { go: deliveries, held: [] };
  const verdicts = new Map<string, { pass: number; waitUntil: number | null }>();
  await Promise.all(
    [...Map.groupBy(keyed, (d) => d.dispatch.tenantId!)].map(async ([tenantId, list]) => {
      const runs = new Map<string, number>();
      for (const d of list) runs.set(d.dispatch.origin!, (runs.get(d.dispatch.origin!) ?? 0) + 1);
      try {
        const answers = await gateStub(env, tenantId).checkBreakers([...runs].map(([origin, n]) => ({ origin, runs: n })));
        for (const [origin, answer] of Object.entries(answers)) verdicts.set(keyOf(tenantId, origin), answer);
      } catch (err) {
        console.error(`tenant ${tenantId}: its gate could not be asked about breakers; its runs go on`, err);
      }
    }),
  );
  const go: Delivery[] = [];
  const held: Held[] = [];
  for (const d of deliveries) {
    const { tenantId, origin } = d.dispatch;
    const verdict = tenantId !== undefined && origin !== undefined ? verdicts.get(keyOf(tenantId, origin)) : undefined;
    if (!verdict || verdict.pass > 0) {
      if (verdict) verdict.pass--;
      go.push(d);
      continue;
    }
    const until = verdict.waitUntil ?? Date.now() + BASE_COOLDOWN_MS;
    held.push({ delivery: d, until, reason: `circuit breaker open for ${origin}: waiting until ${new Date(until).toISOString()}` });
  }
  return { go, held };
}

/**
 * Tells each shard to hold its runs (queued → waiting until the breaker lets a probe go): their
 * dispatches are then done. A shard that cannot be told gets the dispatches again later.
 */
export async function holdDispatches(env: Env, held: Held[]): Promise<void> {
  await Promise.all(
    [...Map.groupBy(held, (h) => h.delivery.shard)].map(async ([shard, list]) => {
      try {
        await shardStub(env, shard).holdDispatches(
          list.map(({ delivery: { dispatch }, until, reason }) => ({ runId: dispatch.runId, fence: dispatch.fence, until, reason })),
        );
        for (const h of list) h.delivery.done();
      } catch (err) {
        console.error(`shard ${shard}: could not hold ${list.length} runs for a breaker; their dispatches come again`, err);
        for (const h of list) h.delivery.again();
      }
    }),
  );
}

/** The batch's outcomes per tenant and origin, told to the gates once the batch is done. */
export class BreakerLog {
  readonly #byTenant = new Map<string, Array<{ origin: string; ok: boolean | null }>>();

  note(dispatch: KeyedDispatch, outcome: Outcome): void {
    if (dispatch.tenantId === undefined || dispatch.origin === undefined) return;
    const refused = outcome.kind === "permanent" && outcome.status === null;
    const ok = outcome.ok || outcome.accepted === true ? true : countsAsFailure(outcome.status, refused) ? false : null;
    const list = this.#byTenant.get(dispatch.tenantId) ?? [];
    list.push({ origin: dispatch.origin, ok });
    this.#byTenant.set(dispatch.tenantId, list);
  }

  /** Never throws: a breaker that misses some outcomes opens or closes a little later. */
  async flush(env: Env): Promise<void> {
    await Promise.all(
      [...this.#byTenant].map(async ([tenantId, outcomes]) => {
        try {
          await gateStub(env, tenantId).recordOutcomes(outcomes);
        } catch (err) {
          console.error(`tenant ${tenantId}: breaker outcomes not recorded`, err);
        }
      }),
    );
  }
}
