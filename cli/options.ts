import { type Command, InvalidArgumentError } from "commander";

/** Option parsers and the option sets several commands share. A bad value is a usage error (exit 2). */

export function integer(text: string): number {
  if (!/^\d+$/.test(text)) throw new InvalidArgumentError("not a whole number");
  return Number(text);
}

function decimal(text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n)) throw new InvalidArgumentError("not a number");
  return n;
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

export function scheduleOptions(command: Command): Command {
  return command
    .option("--cron <expression>", 'a cron expression, 5 fields or 6 with seconds first, e.g. "0 9 * * 1-5"')
    .option("--tz <zone>", "the cron expression's IANA time zone (default UTC)")
    .option("--every <duration>", "a fixed interval: 30s, 5m, 2h, 1d")
    .option("--at <instant>", "once, at this ISO-8601 instant")
    .option("--delay <duration>", "once, this long from now")
    .option("--start-at <instant>", "cron/every: no fire before")
    .option("--end-at <instant>", "cron/every: no fire after")
    .option("--max-runs <n>", "cron/every: at most this many fires", integer);
}

export function jobOptions(command: Command): Command {
  return scheduleOptions(command)
    .option("-f, --file <path>", "the job as JSON or YAML (the API's job fields); flags given replace its fields")
    .option("--name <name>", "the job's name")
    .option("--target <url>", "the target's URL (a target is replaced whole)")
    .option("--method <method>", "the target's HTTP method (default POST)")
    .option("-H, --header <name:value>", "a header sent to the target (repeatable)", collect)
    .option("--body <body>", "the request body: a JSON object or array, or text")
    .option("--timeout-ms <ms>", "per attempt", integer)
    .option("--overlap <policy>", "allow, forbid, buffer_one or replace")
    .option("--misfire <policy>", "fire_once, skip or catch_up")
    .option("--jitter <duration>", "spread each fire over this window")
    .option("--max-concurrency <n>", "at most this many runs at once", integer)
    .option("--rate <perSecond>", "runs start at most this often", decimal);
}
