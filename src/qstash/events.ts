import type { RunView } from "../protocol/shard-rpc";

/**
 * A message's log as QStash's /v2/events shows it (the SDK's `Log`), read off its run and the
 * run's attempts: CREATED, then per attempt ACTIVE and DELIVERED or ERROR, RETRY while it waits
 * for the next, FAILED once it ended without success, CANCELED. Newest first.
 */
export type LogState = "CREATED" | "ACTIVE" | "DELIVERED" | "ERROR" | "RETRY" | "FAILED" | "CANCELED" | "IN_PROGRESS";

export interface LogEvent {
  time: number;
  state: LogState;
  messageId: string;
  url: string;
  nextDeliveryTime?: number;
  error?: string;
  topicName?: string;
  endpointName?: string;
  label?: string;
  labels?: string[];
}

export interface MessageOfRun {
  messageId: string;
  url: string;
  topicName?: string;
  endpointName?: string;
  label?: string;
}

export function eventsOfRun(run: RunView, message: MessageOfRun): LogEvent[] {
  const base = {
    messageId: message.messageId,
    url: message.url,
    ...(message.topicName !== undefined && { topicName: message.topicName }),
    ...(message.endpointName !== undefined && { endpointName: message.endpointName }),
    ...(message.label !== undefined && { label: message.label.split(",")[0], labels: message.label.split(",") }),
  };
  const events: LogEvent[] = [{ ...base, time: run.createdAt, state: "CREATED" }];
  for (const a of run.attemptLog ?? []) {
    events.push({ ...base, time: a.startedAt, state: "ACTIVE" });
    if (a.finishedAt === null) continue;
    if (a.outcome === "succeeded") events.push({ ...base, time: a.finishedAt, state: "DELIVERED" });
    else if (a.outcome === "failed" || a.outcome === "timed_out")
      events.push({ ...base, time: a.finishedAt, state: "ERROR", ...(a.error !== null && { error: a.error }) });
  }
  const last = run.finishedAt ?? run.attemptLog?.at(-1)?.finishedAt ?? run.createdAt;
  if (run.state === "retry_wait") {
    events.push({ ...base, time: last, state: "RETRY", ...(run.dueAt !== null && { nextDeliveryTime: run.dueAt }) });
  } else if (run.state === "dead" || run.state === "failed") {
    events.push({ ...base, time: last, state: "FAILED", ...(run.error !== null && { error: run.error }) });
  } else if (run.state === "cancelled") {
    events.push({ ...base, time: last, state: "CANCELED" });
  }
  // Newest first; of one instant, the later step first.
  return events
    .map((e, i) => ({ e, i }))
    .sort((x, y) => y.e.time - x.e.time || y.i - x.i)
    .map(({ e }) => e);
}
