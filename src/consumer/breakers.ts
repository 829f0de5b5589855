import { BASE_COOLDOWN_MS, type BreakerVerdict, callerOf, MAX_HOLD_MS, originHealth } from "../gate/breaker";
import type { KeyedDispatch, Outcome } from "../protocol/queue-messages";
import { gateStub, shardStub } from "../stubs";
import type { Delivery } from "./deliveries";

/** A dispatch the breaker of its origin holds back, and until when; or, `giveUp`, whose run ends dead uncalled. */
export interface Held {
  delivery: Delivery;
  until: number;
  reason: string;
  giveUp?: true;
}

/**
 * Asks the tenants' gates, one call per tenant in the batch, which of the batch's dispatches
 * may call each origin now (src/gate/breaker.ts), naming each one's caller so that a probe goes
 * round the held jobs. The others are held: their targets are not called, so no attempt is
 * spent on an origin known to be down. A gate that cannot be asked holds nothing.
 */
export async function screenDispatches(env: Env, deliveries: Delivery[]): Promise<{ go: Delivery[]; held: Held[] }> {
  const keyed = deliveries.filter((d) => d.dispatch.tenantId !== undefined && d.dispatch.origin !== undefined);
  if (keyed.length === 0) return { go: deliveries, held: [] };
  const verdicts = new Map<Delivery, Omit<BreakerVerdict, "breaker" | "pass">>();
  await Promise.all(
    [...Map.groupBy(keyed, (d) => d.dispatch.tenantId!)].map(async ([tenantId, list]) => {
      const byOrigin = Map.groupBy(list, (d) => d.dispatch.origin!);
      const asks = [...byOrigin].map(([origin, ds]) => ({ origin, callers: ds.map((d) => callerOf(d.dispatch.runId)) }));
      try {
        const answers = await gateStub(env, tenantId).checkBreakers(asks);
        for (const [origin, { pass, ...answer }] of Object.entries(answers)) {
          const passing = new Set(pass);
          byOrigin.get(origin)?.forEach((d, i) => {
            if (!passing.has(i)) verdicts.set(d, answer);
          });
        }
      } catch (err) {
        console.error(`tenant ${tenantId}: its gate could not be asked about breakers; its runs go on`, err);
      }
    }),
  );
  const go: Delivery[] = [];
  const held: Held[] = [];
  for (const d of deliveries) {
    const verdict = verdicts.get(d);
    if (!verdict) {
      go.push(d);
      continue;
    }
    const { origin } = d.dispatch;
    if (verdict.giveUp) {
      const since = new Date(verdict.downSince ?? Date.now()).toISOString();
      const reason = `circuit breaker open for ${origin} since ${since}, over ${MAX_HOLD_MS / 3_600_000} h: not called, the run gives up`;
      held.push({ delivery: d, until: Date.now(), reason, giveUp: true });
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
          list.map(({ delivery: { dispatch }, until, reason, giveUp }) => ({
            runId: dispatch.runId,
            fence: dispatch.fence,
            until,
            reason,
            ...(giveUp && { giveUp }),
          })),
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
  readonly #byTenant = new Map<string, Array<{ origin: string; ok: boolean | null; caller: string }>>();

  note(dispatch: KeyedDispatch, outcome: Outcome): void {
    if (dispatch.tenantId === undefined || dispatch.origin === undefined) return;
    // Refused before it was sent: the SSRF guard (permanent, no status), or its request could
    // not be made (keys missing: no request start). Neither says anything of the origin.
    const refused = outcome.status === null && (outcome.kind === "permanent" || outcome.startedAt === undefined);
    const ok = outcome.ok || outcome.accepted === true ? true : originHealth(outcome.status, refused);
    const list = this.#byTenant.get(dispatch.tenantId) ?? [];
    list.push({ origin: dispatch.origin, ok, caller: callerOf(dispatch.runId) });
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
