/**
 * The floor's consumer (bench/floor/worker.ts has the rest): one HTTP call per dispatch, at most
 * six waiting at once per invocation (src/consumer/connections.ts, the platform's limit, unless
 * `--connections` lifts it), then the batch is acked. A Worker of its own, so that `npm run
 * bench:floor` can run it in a second `wrangler dev` as `npm start` runs edgecron's runner.
 */
import { FairSlots } from "../../src/consumer/fair-slots";
import type { Pack } from "./pack";

export default {
  async queue(batch: MessageBatch<Pack>): Promise<void> {
    // One tenant: the slots first come, first served, as the consumer hands them to a lone tenant.
    const slots = new FairSlots(batch.messages[0]?.body.connections).of("bench");
    await Promise.all(
      batch.messages.flatMap((m) =>
        m.body.indexes.map((i) =>
          slots.hold(async () => {
            const headers = { "X-Edgecron-Scheduled-At": new Date(m.body.scheduledAt).toISOString() };
            const response = await fetch(`${m.body.url}/${m.body.kind}/${i}`, { method: "POST", headers });
            await response.body?.cancel();
          }),
        ),
      ),
    );
  },
} satisfies ExportedHandler<unknown, Pack>;
