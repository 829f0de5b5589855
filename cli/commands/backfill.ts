import { SingleBar } from "cli-progress";
import type { Command } from "commander";
import { EdgecronError } from "edgecron/client";
import { covered, firstSlice, halved, nextSlice, type Slice } from "../backfill-slices.ts";
import { contextOf } from "../context.ts";
import { UsageError } from "../exit.ts";

/** The API's words for a range over its per-call limit (a 400 like any invalid field). */
const tooMany = (err: unknown) => err instanceof EdgecronError && err.status === 400 && /more than \d+ fires/.test(err.message);

function instant(text: string, flag: string): number {
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw new UsageError(`${flag} must be an ISO-8601 instant, e.g. 2026-12-01T00:00:00Z`);
  return ms;
}

export function registerBackfill(program: Command): void {
  program
    .command("backfill <jobId>")
    .description("a run for every fire of a job in [from, to], in as many calls as the range needs; idempotent")
    .requiredOption("--from <instant>", "the range's first instant, ISO-8601")
    .requiredOption("--to <instant>", "the range's last instant, ISO-8601")
    .action(async (jobId: string, options: { from: string; to: string }, command: Command) => {
      const from = instant(options.from, "--from");
      const end = instant(options.to, "--to");
      if (end < from) throw new UsageError("--to must not be before --from");
      const { client, out } = contextOf(command);
      const created: string[] = [];
      const existing: string[] = [];
      let calls = 0;
      // Progress is the share of the range covered: how many fires it holds is known only at its end.
      const bar = out.interactive
        ? new SingleBar({
            format: "backfill [{bar}] {percentage}% of the range | {created} created, {existing} existing",
            hideCursor: true,
          })
        : null;
      bar?.start(100, 0, { created: 0, existing: 0 });
      try {
        let slice: Slice | null = firstSlice(from, end);
        while (slice) {
          calls++;
          let answer: { created: string[]; existing: string[] };
          try {
            answer = await client.jobs.backfill(jobId, { from: new Date(slice.from).toISOString(), to: new Date(slice.to).toISOString() });
          } catch (err) {
            if (!tooMany(err)) throw err;
            slice = halved(slice);
            continue;
          }
          created.push(...answer.created);
          existing.push(...answer.existing);
          bar?.update(Math.floor(covered(from, end, slice) * 100), { created: created.length, existing: existing.length });
          slice = nextSlice(slice, answer.created.length + answer.existing.length, end);
        }
      } catch (err) {
        bar?.stop();
        if (calls > 1) out.note(`${created.length} runs were created before this; backfill is idempotent: run it again`);
        throw err;
      }
      bar?.stop();
      out.result({ created, existing, calls }, () => `${created.length} runs created, ${existing.length} already existed (${calls} calls)`);
    });
}
