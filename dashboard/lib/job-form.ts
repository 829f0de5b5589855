import type { CreateJob, Schedule } from "../../src/client/index.ts";

/** What the new-job form holds: text as typed, turned into the API's shape by `toCreateJob`. */
export interface JobForm {
  name: string;
  kind: "cron" | "every" | "at" | "delay";
  value: string;
  timezone: string;
  url: string;
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  body: string;
  maxAttempts: string;
}

export const EMPTY_FORM: JobForm = {
  name: "",
  kind: "cron",
  value: "*/5 * * * *",
  timezone: Intl.DateTimeFormat().resolvedOptions().timeZone,
  url: "",
  method: "POST",
  body: "",
  maxAttempts: "3",
};

export function scheduleOf(form: JobForm): Schedule {
  const value = form.value.trim();
  switch (form.kind) {
    case "cron":
      return { cron: value, timezone: form.timezone.trim() || "UTC" };
    case "at":
      // <input type="datetime-local"> gives the reader's wall-clock time; the API wants an instant.
      return { at: new Date(value).toISOString() };
    default:
      return { [form.kind]: value };
  }
}

/**
 * The job to create. The API validates every field and names the one it refuses, so this only
 * shapes what was typed: a body that parses as JSON is sent as JSON, any other text as text.
 */
export function toCreateJob(form: JobForm): CreateJob {
  const target: NonNullable<CreateJob["target"]> = { url: form.url.trim(), method: form.method };
  const job: CreateJob = { schedule: scheduleOf(form), target };
  if (form.name.trim()) job.name = form.name.trim();
  if (form.body.trim()) target.body = parseBody(form.body);
  if (form.maxAttempts.trim()) job.retry = { maxAttempts: Number(form.maxAttempts) };
  return job;
}

function parseBody(text: string): string | Record<string, unknown> | unknown[] {
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null) return parsed as Record<string, unknown>;
  } catch {}
  return text;
}
