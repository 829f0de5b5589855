import type { Command } from "commander";
import { contextOf } from "../context.ts";
import { createBodyOf, type JobFlags, patchBodyOf } from "../job-input.ts";
import { integer, jobOptions } from "../options.ts";
import { jobDetails, jobsTable, runDetails } from "../views.ts";

/** Takes up to `limit` items of a list that follows its cursors. */
async function take<T>(items: AsyncIterable<T>, limit: number): Promise<T[]> {
  const taken: T[] = [];
  if (limit <= 0) return taken;
  for await (const item of items) {
    taken.push(item);
    if (taken.length >= limit) break;
  }
  return taken;
}

export { take };

export function registerJobs(program: Command): void {
  const jobs = program.command("jobs").description("list, read and change jobs");

  jobs
    .command("list")
    .description("the jobs, newest first (every page)")
    .option("--limit <n>", "at most this many", integer)
    .action(async (options: { limit?: number }, command: Command) => {
      const { client, out } = contextOf(command);
      const list = await take(client.jobs.all(), options.limit ?? Number.POSITIVE_INFINITY);
      out.result(list, () => (list.length === 0 ? "no jobs" : jobsTable(list)));
    });

  jobs
    .command("get <id>")
    .description("one job")
    .action(async (id: string, _options: unknown, command: Command) => {
      const { client, out } = contextOf(command);
      const job = await client.jobs.get(id);
      out.result(job, () => jobDetails(job));
    });

  jobOptions(jobs.command("create"))
    .description("create a job from flags or a file (-f job.yaml)")
    .action(async (options: JobFlags, command: Command) => {
      const body = createBodyOf(options);
      const { client, out } = contextOf(command);
      const job = await client.jobs.create(body);
      out.result(job, () => jobDetails(job));
    });

  jobOptions(jobs.command("patch <id>"))
    .description("change the fields given, each replaced whole; the rest stay")
    .action(async (id: string, options: JobFlags, command: Command) => {
      const body = patchBodyOf(options);
      const { client, out } = contextOf(command);
      const job = await client.jobs.patch(id, body);
      out.result(job, () => jobDetails(job));
    });

  for (const action of ["pause", "resume"] as const) {
    jobs
      .command(`${action} <id>`)
      .description(
        action === "pause" ? "pause: no run starts after the answer" : "resume from now on (missed fires follow its misfire policy)",
      )
      .action(async (id: string, _options: unknown, command: Command) => {
        const { client, out } = contextOf(command);
        const job = await client.jobs[action](id);
        out.result(job, () => jobDetails(job));
      });
  }

  jobs
    .command("trigger <id>")
    .description("one extra run now")
    .option("--idempotency-key <key>", "repeats with the same key yield the same run")
    .action(async (id: string, options: { idempotencyKey?: string }, command: Command) => {
      const { client, out } = contextOf(command);
      const run = await client.jobs.trigger(id, options.idempotencyKey);
      out.result(run, () => runDetails(run));
    });

  jobs
    .command("delete <id>")
    .description("delete: no run starts after the answer; its runs stay readable")
    .action(async (id: string, _options: unknown, command: Command) => {
      const { client, out } = contextOf(command);
      const deleted = await client.jobs.delete(id);
      out.result(deleted, () => `deleted ${deleted.id}`);
    });
}
