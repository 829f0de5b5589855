/**
 * The floor of edgecron's shape on the local stack: what the platform path alone costs, with none
 * of edgecron's bookkeeping. Durable Objects ("tickers", standing in for shards) wake by alarm at
 * T and send their dispatches, `perMessage` to a queue message and at most 100 messages to a
 * `sendBatch`, as src/shard/dispatch-packs.ts does, each to the queue its ticker maps to; the
 * consumer (runner.ts, a Worker of its own as edgecron's runner is) makes one HTTP call per
 * dispatch and acks the batch. No run is written, claimed or reported: no SQLite, no RPC back,
 * no signing. `bench/floor.ts` runs it.
 */
import { DurableObject } from "cloudflare:workers";
import { QUEUE_BATCH_MESSAGES } from "../../src/shard/dispatch-packs";
import type { Pack } from "./pack";

interface FloorEnv {
  TICKER: DurableObjectNamespace<Ticker>;
  FLOOR: Queue<Pack>;
  FLOOR_1: Queue<Pack>;
}

/**
 * What one ticker sends: the indexes it owns, at `at` and then (steady) every `everyMs` until
 * `until`, to the receiver's /<kind>/<index>.
 */
interface Plan {
  at: number;
  everyMs: number | null;
  until: number;
  kind: Pack["kind"];
  url: string;
  indexes: number[];
  perMessage: number;
  /** Calls waiting at once per consumer invocation: the platform's six unless lifted to see what that limit costs. */
  connections: number;
  queue: 0 | 1;
}

export class Ticker extends DurableObject<FloorEnv> {
  async arm(plan: Plan): Promise<void> {
    await this.ctx.storage.put("plan", plan);
    await this.ctx.storage.setAlarm(plan.at);
  }

  async alarm(): Promise<void> {
    const plan = await this.ctx.storage.get<Plan>("plan");
    if (!plan) return;
    // The next tick is armed first, so a slow send never delays it (an alarm is one per object).
    const next = plan.everyMs === null ? null : plan.at + plan.everyMs;
    if (next !== null && next < plan.until) {
      await this.ctx.storage.put("plan", { ...plan, at: next });
      await this.ctx.storage.setAlarm(next);
    }
    const queue = plan.queue === 0 ? this.env.FLOOR : this.env.FLOOR_1;
    const packs: Pack[] = [];
    for (let i = 0; i < plan.indexes.length; i += plan.perMessage) {
      packs.push({
        url: plan.url,
        connections: plan.connections,
        kind: plan.kind,
        scheduledAt: plan.at,
        indexes: plan.indexes.slice(i, i + plan.perMessage),
      });
    }
    for (let i = 0; i < packs.length; i += QUEUE_BATCH_MESSAGES) {
      await queue.sendBatch(packs.slice(i, i + QUEUE_BATCH_MESSAGES).map((body) => ({ body, contentType: "json" as const })));
    }
  }
}

export default {
  /** POST /start: index i (a burst's job, a steady schedule) goes to ticker i mod tickers. */
  async fetch(request: Request, env: FloorEnv): Promise<Response> {
    if (request.method !== "POST" || new URL(request.url).pathname !== "/start") return new Response("floor probe\n");
    const { n, tickers, ...plan } = await request.json<{ n: number; tickers: number } & Omit<Plan, "indexes" | "queue">>();
    await Promise.all(
      Array.from({ length: tickers }, (_, t) => {
        const indexes = Array.from({ length: Math.ceil((n - t) / tickers) }, (_, k) => t + k * tickers);
        const stub = env.TICKER.get(env.TICKER.idFromName(`ticker-${t}`));
        return stub.arm({ ...plan, indexes, queue: (t % 2) as 0 | 1 });
      }),
    );
    return Response.json({ armed: tickers });
  },
} satisfies ExportedHandler<FloorEnv>;
