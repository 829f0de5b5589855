import { SingleBar } from "cli-progress";
import type { Command } from "commander";
import { type EdgecronClient, EdgecronError } from "edgecron/client";
import { readApplyFile } from "../apply/file.ts";
import { type Change, type Plan, planApply } from "../apply/plan.ts";
import { managedJobs } from "../apply/scope.ts";
import { contextOf } from "../context.ts";
import { cell } from "../output.ts";

const SIGN = { create: "+", update: "~", delete: "-", chain: "~" } as const;

/** The plan as people read it: one line a job, and the fields that change under an update. */
function planText(plan: Plan, file: string): string {
  const lines = plan.changes.map((c) => {
    const id = c.action === "create" || (c.action === "chain" && c.id === null) ? "" : ` ${c.id}`;
    const head = `${SIGN[c.action]} ${c.action} ${c.name ?? "(unnamed)"}${id}`;
    if (c.action !== "update" && c.action !== "chain") return head;
    return [head, ...c.fields.map((f) => `    ${f.field}: ${cell(f.from) || "(unset)"} → ${cell(f.to) || "(unset)"}`)].join("\n");
  });
  const count = (action: Change["action"]) => plan.changes.filter((c) => c.action === action).length;
  const summary =
    plan.changes.length === 0
      ? `nothing to change: ${plan.unchanged.length === 1 ? "1 job matches" : `${plan.unchanged.length} jobs match`} ${file}`
      : `${count("create")} to create, ${count("update")} to update, ${count("delete")} to delete, ${plan.unchanged.length} unchanged${
          count("chain") > 0 ? `; chains of ${count("chain")} to set` : ""
        }`;
  return [...lines, summary].join("\n");
}

/** The plan as --json shows it: no job bodies, whose header values may be secrets. */
const planJson = (plan: Plan) => ({
  changes: plan.changes.map((c) =>
    c.action === "update" || c.action === "chain"
      ? { action: c.action, name: c.name, id: c.id, fields: c.fields }
      : { action: c.action, name: c.name, ...(c.action === "delete" && { id: c.id }) },
  ),
  unchanged: plan.unchanged,
});

/**
 * Carries out one change: a create or an update may take two calls (the definition, then pause
 * or resume). `ids` holds every job's id by name, the ones this apply created included, for the
 * chains, which come last.
 */
async function carryOut(client: EdgecronClient, change: Change, ids: Map<string, string>): Promise<string> {
  switch (change.action) {
    case "chain": {
      const id = change.id ?? ids.get(change.name)!;
      const patch = Object.fromEntries(Object.entries(change.set).map(([field, names]) => [field, names?.map((n) => ids.get(n)!) ?? null]));
      await client.jobs.patch(id, patch);
      return id;
    }
    case "delete":
      await client.jobs.delete(change.id);
      return change.id;
    case "create": {
      const job = await client.jobs.create(change.job);
      if (change.pause) await client.jobs.pause(job.id);
      ids.set(change.name, job.id);
      return job.id;
    }
    case "update":
      if (change.patch) await client.jobs.patch(change.id, change.patch);
      if (change.pause !== null) await client.jobs[change.pause ? "pause" : "resume"](change.id);
      return change.id;
  }
}

type Create = Extract<Change, { action: "create" }>;

/** The most jobs one POST /v1/jobs/batch takes. */
const BATCH = 1_000;

/**
 * Creates a run of the plan's creates with one request per 1,000 (POST /v1/jobs/batch), in
 * order; a pause each asks for follows it. The first item refused stops the apply, as a refused
 * call does, after `onDone` has counted the ones created before it (those after it in its batch
 * were created too, and the next apply finds them).
 */
async function createAll(client: EdgecronClient, creates: Create[], ids: Map<string, string>, onDone: (c: Create) => void) {
  for (let from = 0; from < creates.length; from += BATCH) {
    const chunk = creates.slice(from, from + BATCH);
    const answer = await client.jobs.createMany(chunk.map((c) => c.job));
    for (const [i, result] of answer.results.entries()) {
      const change = chunk[i]!;
      if (!("job" in result)) {
        const { code, message, issues } = result.error;
        throw new EdgecronError(result.status, code, `${change.name}: ${message}`, issues);
      }
      ids.set(change.name, result.job.id);
      if (change.pause) await client.jobs.pause(result.job.id);
      onDone(change);
    }
  }
}

export function registerApply(program: Command): void {
  program
    .command("apply")
    .description("make the tenant's jobs match a file: create missing ones, patch changed ones (matched by name)")
    .requiredOption("-f, --file <path>", "the jobs, as YAML or JSON: { jobs: [ { name, schedule, target, … } ] }")
    .option("--prune", "also delete the tenant's jobs the file does not name (unnamed ones too)")
    .option("--dry-run", "print what would change, and change nothing")
    .action(async (options: { file: string; prune?: boolean; dryRun?: boolean }, command: Command) => {
      const declared = readApplyFile(options.file);
      const { client, out } = contextOf(command);
      const current = await managedJobs(client);
      const plan = planApply(declared, current, { prune: options.prune === true });
      const ids = new Map(current.flatMap((j) => (j.name === null ? [] : [[j.name, j.id] as const])));
      if (options.dryRun || plan.changes.length === 0) {
        out.result({ dryRun: options.dryRun === true, applied: false, ...planJson(plan) }, () =>
          plan.changes.length === 0 ? planText(plan, options.file) : `${planText(plan, options.file)}\n(dry run: nothing was changed)`,
        );
        return;
      }
      const bar = out.interactive ? new SingleBar({ format: "apply [{bar}] {value}/{total} {name}", hideCursor: true }) : null;
      bar?.start(plan.changes.length, 0, { name: "" });
      let done = 0;
      try {
        const creates = plan.changes.filter((c): c is Create => c.action === "create");
        for (const change of plan.changes) {
          if (change.action === "create") {
            // The plan's creates come together (after the deletes and updates, before the chains): all at once, in batches.
            if (change === creates[0]) await createAll(client, creates, ids, (c) => bar?.update(++done, { name: c.name }));
            continue;
          }
          bar?.update(done, { name: change.name ?? "" });
          await carryOut(client, change, ids);
          done++;
        }
        bar?.update(done, { name: "" });
      } catch (err) {
        bar?.stop();
        out.note(`stopped after ${done} of ${plan.changes.length} changes; apply is idempotent: fix the cause and run it again`);
        throw err;
      }
      bar?.stop();
      out.result(
        { dryRun: false, applied: true, ...planJson(plan) },
        () => `${planText(plan, options.file)}\napplied: the jobs now match ${options.file}`,
      );
    });
}
