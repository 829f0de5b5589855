import type { Command } from "commander";
import { everyItem } from "edgecron/client";
import { contextOf } from "../context.ts";
import { integer } from "../options.ts";
import { runDetails, runsTable } from "../views.ts";
import { take } from "./jobs.ts";

const PAGE = 200;

export function registerRuns(program: Command): void {
  const runs = program.command("runs").description("a job's runs, and retries");

  runs
    .command("list <jobId>")
    .description("a job's runs, newest first")
    .option("--limit <n>", "at most this many (following the pages)", integer, 50)
    .action(async (jobId: string, options: { limit: number }, command: Command) => {
      const { client, out } = contextOf(command);
      const size = Math.min(options.limit, PAGE) || 1;
      const list = await take(
        everyItem((cursor) => client.jobs.runs(jobId, { limit: size, cursor })),
        options.limit,
      );
      out.result(list, () => (list.length === 0 ? "no runs" : runsTable(list)));
    });

  runs
    .command("get <runId>")
    .description("one run, with every attempt")
    .action(async (runId: string, _options: unknown, command: Command) => {
      const { client, out } = contextOf(command);
      const run = await client.runs.get(runId);
      out.result(run, () => runDetails(run));
    });

  runs
    .command("retry <runId>")
    .description("give a dead or failed run a fresh set of attempts")
    .action(async (runId: string, _options: unknown, command: Command) => {
      const { client, out } = contextOf(command);
      const run = await client.runs.retry(runId);
      out.result(run, () => runDetails(run));
    });

  program
    .command("dead-letters")
    .description("runs that ended without success (dead or failed), newest first")
    .option("--job <jobId>", "only this job's")
    .option("--limit <n>", "at most this many (following the pages)", integer, 50)
    .action(async (options: { job?: string; limit: number }, command: Command) => {
      const { client, out } = contextOf(command);
      const size = Math.min(options.limit, PAGE) || 1;
      const list = await take(
        everyItem((cursor) => client.runs.deadLetters({ jobId: options.job, limit: size, cursor })),
        options.limit,
      );
      out.result(list, () => (list.length === 0 ? "no dead letters" : runsTable(list)));
    });
}
