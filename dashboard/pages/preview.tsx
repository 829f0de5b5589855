import { useState } from "preact/hooks";
import type { EdgecronClient, Preview as PreviewAnswer } from "../../src/client/index.ts";
import { ErrorText } from "../components/messages.tsx";
import { ZonedInstants } from "../components/zoned-instants.tsx";
import { messageOf } from "../lib/use-api.ts";

/** Any cron expression's next instants in a zone, the clock changes marked: try before you create. */
export function Preview({ client }: { client: EdgecronClient }) {
  const [cron, setCron] = useState("30 2 * * *");
  const [timezone, setTimezone] = useState("Europe/Berlin");
  const [from, setFrom] = useState("");
  const [answer, setAnswer] = useState<PreviewAnswer | null>(null);
  const [error, setError] = useState<string | null>(null);

  async function submit(event: Event) {
    event.preventDefault();
    setError(null);
    try {
      setAnswer(
        await client.schedules.preview({ schedule: { cron, timezone }, count: 12, ...(from && { from: new Date(from).toISOString() }) }),
      );
    } catch (err) {
      setAnswer(null);
      setError(messageOf(err));
    }
  }

  return (
    <section aria-labelledby="preview-page-title">
      <h1 id="preview-page-title">Schedule preview</h1>
      <form class="inline-form" onSubmit={submit}>
        <label>
          Cron expression
          <input required value={cron} onInput={(e) => setCron(e.currentTarget.value)} />
        </label>
        <label>
          Time zone
          <input required value={timezone} onInput={(e) => setTimezone(e.currentTarget.value)} />
        </label>
        <label>
          From (optional)
          <input type="datetime-local" value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
        </label>
        <button type="submit">Preview</button>
      </form>
      <ErrorText message={error} />
      {answer && (
        <>
          <p class="lead">{answer.description}</p>
          <ZonedInstants instants={answer.instants} timeZone={timezone} since={from ? new Date(from) : undefined} />
        </>
      )}
    </section>
  );
}
