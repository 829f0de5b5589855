/**
 * What the consumer reads of a target's answer: a step's result, capped; a failure's body, its
 * start only; a success's body, discarded. Both read the stream by hand because `Response` has no capped read: `text()` would
 * read a body of any size.
 */

/** A success's body up to this long, arriving within this grace, is read to its end rather than cancelled. */
export const DRAINED_BODY_BYTES = 16 * 1024;
export const DRAIN_GRACE_MS = 100;

/**
 * A success's body is not kept, but a short one is read to its end when it comes at once: that
 * leaves the connection open for the next attempt to the same origin, where cancelling a body
 * closes its connection (measured with the bench's receiver counting its connections: 1,000 runs
 * made 1,000 with every body cancelled, 12 with short bodies read). A longer body, or one still
 * coming after a short grace, is cancelled unread; nothing here turns a success into a failure.
 */
export async function discardBody(response: Response): Promise<void> {
  if (!response.body) return;
  const reader = response.body.getReader();
  const giveUp = setTimeout(() => reader.cancel().catch(() => {}), DRAIN_GRACE_MS);
  try {
    for (let size = 0; ; ) {
      const { done, value } = await reader.read();
      if (done) return;
      size += value.byteLength;
      if (size > DRAINED_BODY_BYTES) return await reader.cancel();
    }
  } catch {
    // The attempt's timeout or the peer ended the body: the answer stands.
  } finally {
    clearTimeout(giveUp);
  }
}

/** The response body as text, or null (and the rest unread) when it is longer than `max` bytes. */
export async function readAtMost(response: Response, max: number): Promise<string | null> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}

/**
 * The body's first `maxBytes` bytes as text, the rest cancelled unread: a failure's body is kept
 * only as the start of an error, and a target streaming a huge one must not fill the isolate that
 * runs other tenants' attempts of the batch. A character cut at the limit is left out.
 */
export async function readPrefix(response: Response, maxBytes: number): Promise<string> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (let size = 0; size < maxBytes; ) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    const kept = value.subarray(0, maxBytes - size);
    size += kept.byteLength;
    text += decoder.decode(kept, { stream: true });
  }
  await reader.cancel();
  return text;
}
