/**
 * What the /v2 (QStash) surface answers when a request is wrong: the status and a message that
 * names the header, path segment or field at fault. The API turns it into QStash's error body,
 * `{ "error": "…" }`, which the SDK hands to its caller as the QstashError's message.
 */
export class QstashInputError extends Error {
  constructor(
    readonly field: string,
    reason: string,
    readonly status: 400 | 404 | 412 = 400,
  ) {
    super(`${field}: ${reason}`);
  }
}
