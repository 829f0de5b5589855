import { useState } from "preact/hooks";
import type { EdgecronClient, Preview } from "../../src/client/index.ts";
import { ErrorText } from "../components/messages.tsx";
import { ZonedInstants } from "../components/zoned-instants.tsx";
import { EMPTY_FORM, type JobForm, scheduleOf, toCreateJob } from "../lib/job-form.ts";
import { navigate } from "../lib/route.ts";
import { messageOf } from "../lib/use-api.ts";

const HINTS: Record<JobForm["kind"], string> = {
  cron: "Five fields (minute hour day month weekday), or six with seconds first: */5 * * * *",
  every: "A duration: 30s, 5m, 1h",
  at: "One instant, in your local time",
  delay: "Once, this long from now: 10m",
};

export function NewJob({ client }: { client: EdgecronClient }) {
  const [form, setForm] = useState<JobForm>(EMPTY_FORM);
  const [error, setError] = useState<string | null>(null);
  const [preview, setPreview] = useState<Preview | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (field: keyof JobForm) => (event: Event) => setForm({ ...form, [field]: (event.currentTarget as HTMLInputElement).value });

  async function create(event: Event) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const job = await client.jobs.create(toCreateJob(form));
      navigate({ page: "job", id: job.id });
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  }

  async function showPreview() {
    setError(null);
    try {
      setPreview(await client.schedules.preview({ schedule: scheduleOf(form), count: 8 }));
    } catch (err) {
      setPreview(null);
      setError(messageOf(err));
    }
  }

  return (
    <section aria-labelledby="new-job-title">
      <h1 id="new-job-title">New job</h1>
      <form class="form" onSubmit={create}>
        <label>
          Name
          <input value={form.name} onInput={set("name")} placeholder="nightly-report" />
        </label>
        <fieldset>
          <legend>Schedule</legend>
          <label>
            Kind
            <select value={form.kind} onChange={set("kind")}>
              <option value="cron">cron</option>
              <option value="every">every (interval)</option>
              <option value="at">at (one instant)</option>
              <option value="delay">delay (once, from now)</option>
            </select>
          </label>
          <label for="schedule-value">{form.kind === "cron" ? "Cron expression" : form.kind === "at" ? "Instant" : "Duration"}</label>
          {form.kind === "at" ? (
            <input
              id="schedule-value"
              required
              type="datetime-local"
              step={1}
              value={form.value}
              onInput={set("value")}
              aria-describedby="schedule-hint"
            />
          ) : (
            <input id="schedule-value" required type="text" value={form.value} onInput={set("value")} aria-describedby="schedule-hint" />
          )}
          <p id="schedule-hint" class="hint">
            {HINTS[form.kind]}
          </p>
          {form.kind === "cron" && (
            <label>
              Time zone
              <input value={form.timezone} onInput={set("timezone")} placeholder="Europe/Berlin" />
            </label>
          )}
          <button type="button" class="secondary" onClick={showPreview}>
            Preview schedule
          </button>
        </fieldset>
        <fieldset>
          <legend>Target</legend>
          <label>
            URL
            <input required type="url" value={form.url} onInput={set("url")} placeholder="https://example.com/hook" />
          </label>
          <label>
            Method
            <select value={form.method} onChange={set("method")}>
              {["GET", "POST", "PUT", "PATCH", "DELETE"].map((m) => (
                <option key={m} value={m}>
                  {m}
                </option>
              ))}
            </select>
          </label>
          <label>
            Body (JSON or text)
            <textarea rows={3} value={form.body} onInput={set("body")} />
          </label>
          <label>
            Attempts at most
            <input type="number" min={1} value={form.maxAttempts} onInput={set("maxAttempts")} />
          </label>
        </fieldset>
        <ErrorText message={error} />
        <button type="submit" disabled={busy}>
          Create job
        </button>
      </form>
      {preview && (
        <section aria-label="Schedule preview">
          <p>{preview.description}</p>
          <ZonedInstants instants={preview.instants} timeZone={form.kind === "cron" ? form.timezone || "UTC" : "UTC"} />
        </section>
      )}
    </section>
  );
}
