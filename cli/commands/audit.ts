import type { Command } from "commander";
import { type AuditEntry, everyItem } from "edgecron/client";
import { contextOf } from "../context.ts";
import { integer } from "../options.ts";
import { table } from "../output.ts";
import { formatInstant, localZone } from "../time.ts";
import { take } from "./jobs.ts";

const PAGE = 200;

/** One line per entry: when, who, what, on what, from where. Pure: entries in, text out. */
function auditTable(entries: AuditEntry[], zone = localZone()): string {
  return table(
    [`AT (${zone})`, "ACTOR", "ACTION", "SUBJECT", "CLIENT"],
    entries.map((e) => [formatInstant(e.at, zone), e.actor, e.action, e.subject, e.client ?? ""]),
  );
}

export function registerAudit(program: Command): void {
  program
    .command("audit")
    .description("the audit log: who changed what, when and from where, newest first (needs the admin scope)")
    .option("--action <action>", "one action (job.patch) or a kind of them (job)")
    .option("--actor <keyId>", "only this key's changes (or admin)")
    .option("--subject <id>", "only changes of this job, run, key or tenant")
    .option("--since <instant>", "only entries at or after this ISO-8601 instant")
    .option("--until <instant>", "only entries at or before this ISO-8601 instant")
    .option("--tenant <tenantId>", "admin token only: one tenant's entries")
    .option("--limit <n>", "at most this many (following the pages)", integer, 50)
    .action(
      async (
        options: { action?: string; actor?: string; subject?: string; since?: string; until?: string; tenant?: string; limit: number },
        command: Command,
      ) => {
        const { client, out } = contextOf(command);
        const size = Math.min(options.limit, PAGE) || 1;
        const { limit, tenant, ...filters } = options;
        const list = await take(
          everyItem((cursor) => client.audit.list({ ...filters, ...(tenant && { tenantId: tenant }), limit: size, cursor })),
          limit,
        );
        out.result(list, () => (list.length === 0 ? "no entries" : auditTable(list)));
      },
    );
}
