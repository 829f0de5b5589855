import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { registerApply } from "./commands/apply.ts";
import { registerAudit } from "./commands/audit.ts";
import { registerBackfill } from "./commands/backfill.ts";
import { registerJobs } from "./commands/jobs.ts";
import { registerPreview } from "./commands/preview.ts";
import { registerRuns } from "./commands/runs.ts";
import { EXIT, failureOf } from "./exit.ts";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };

export function buildProgram(): Command {
  const program = new Command("edgecron")
    .description("edgecron's command line: jobs, runs, previews, backfills, apply and the audit log, over the HTTP API")
    .version(version)
    .option("--url <url>", "the API, e.g. http://127.0.0.1:8787 (else EDGECRON_URL, else the config file's url)")
    .option("--token <token>", "a tenant API key or the admin token (else EDGECRON_TOKEN, else the config file's token)")
    .option("--config <path>", "a JSON file with url and token (default ~/.config/edgecron/config.json)")
    .option("--json", "print the API's answers as JSON, for scripts")
    .addHelpText("after", "\nExit codes: 0 ok, 1 API or other error, 2 usage error, 3 not found.")
    .showHelpAfterError("(edgecron --help lists the commands and options)")
    // Commander would exit by itself, always with 1; the CLI exits 2 for a usage error.
    .exitOverride();
  registerJobs(program);
  registerRuns(program);
  registerPreview(program);
  registerBackfill(program);
  registerApply(program);
  registerAudit(program);
  return program;
}

/** Runs the command line and returns the exit code; commander prints its own usage messages. */
export async function run(argv: string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const { code, message } = failureOf(err);
    process.stderr.write(`edgecron: ${message}\n`);
    return code;
  }
}
