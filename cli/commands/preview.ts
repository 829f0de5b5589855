import type { Command } from "commander";
import { contextOf } from "../context.ts";
import { UsageError } from "../exit.ts";
import { type ScheduleFlags, scheduleOf } from "../job-input.ts";
import { integer, scheduleOptions } from "../options.ts";
import { table } from "../output.ts";
import { formatInstant, localZone } from "../time.ts";

export function registerPreview(program: Command): void {
  scheduleOptions(program.command("preview"))
    .description("the next fires of a schedule, exactly as a job with it would fire")
    .option("--count <n>", "how many fires (1-100)", integer, 10)
    .option("--from <instant>", "as if the job were created at this instant (default now)")
    .action(async (options: ScheduleFlags & { count: number; from?: string }, command: Command) => {
      const schedule = scheduleOf(options);
      if (!schedule) throw new UsageError("give a schedule: --cron (with --tz), --every, --at or --delay");
      const { client, out } = contextOf(command);
      const preview = await client.schedules.preview({ schedule, count: options.count, from: options.from });
      out.result(preview, () => {
        const local = localZone();
        // The job's zone beside the reader's: a cron time is meant in its zone.
        const zones = [
          local,
          ...(schedule.timezone && schedule.timezone !== local ? [schedule.timezone] : []),
          ...(local === "UTC" ? [] : ["UTC"]),
        ];
        const rows = preview.instants.map((t, i) => [String(i + 1), ...zones.map((zone) => formatInstant(t, zone))]);
        const list = rows.length === 0 ? "no fire left" : table(["#", ...zones], rows);
        return `${preview.description}\n${list}`;
      });
    });
}
