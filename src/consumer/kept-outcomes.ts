import { queuedBytesOf as bytesOf, type Outcome, type OutcomesMessage, sendBatches } from "../protocol/queue-messages";

/**
 * A queue message holds at most 128 KB (1 KB = 1,000 bytes), with room here for the Queue's own
 * metadata. A step's result is at most 64 KiB of text, but its JSON may be six times that (a
 * control character is written `\u0001`), and a group holds up to 100 outcomes: sent as one
 * message, a group of kept outcomes could not be queued, its dispatches came again, and their
 * targets were called again.
 */
const MESSAGE_BYTES = 127_000;

/**
 * Outcomes the consumer keeps on the queue for their shard (src/consumer/reporter.ts) as
 * messages of at most MESSAGE_BYTES, in `sendBatch` calls within the Queues limits. An outcome
 * too large for a message alone has its result cut to fit (`fitted`).
 */
export function keptMessages(shard: string, outcomes: readonly Outcome[]): OutcomesMessage[][] {
  const empty = bytesOf({ kind: "outcomes", shard, outcomes: [] });
  const messages: OutcomesMessage[] = [];
  let message: OutcomesMessage | null = null;
  let bytes = 0;
  for (const outcome of outcomes) {
    const o = fitted(outcome, MESSAGE_BYTES - empty);
    const size = bytesOf(o) + 1;
    if (message === null || bytes + size > MESSAGE_BYTES) {
      message = { kind: "outcomes", shard, outcomes: [] };
      bytes = empty;
      messages.push(message);
    }
    message.outcomes.push(o);
    bytes += size;
  }
  return sendBatches(messages);
}

/** What a cut result ends with, so that the run shows it is not the target's whole answer. */
export function truncationMarker(keptChars: number, totalChars: number): string {
  return `\n[edgecron: result truncated to ${keptChars} of ${totalChars} characters, so that its outcome fit a queue message]`;
}

/**
 * The outcome, its result's start kept, with a marker, so that its JSON takes at most `room`
 * bytes: the success is recorded as one, the whole answer lost only where the queue could not
 * carry it (its shard was unreachable when it was reported).
 */
export function fitted(outcome: Outcome, room: number): Outcome {
  const result = outcome.result;
  if (result === undefined || bytesOf(outcome) <= room) return outcome;
  const cut = (chars: number): Outcome => ({ ...outcome, result: result.slice(0, chars) + truncationMarker(chars, result.length) });
  // The longest start that fits: JSON's escapes make bytes per character vary, so it is searched for.
  let lo = 0;
  let hi = result.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (bytesOf(cut(mid)) <= room) lo = mid;
    else hi = mid - 1;
  }
  return cut(lo);
}
