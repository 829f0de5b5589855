import type { QstashMeta } from "./meta";

/**
 * The body QStash sends a message's callback (after a delivery that succeeded) and its failure
 * callback (once the message ends without success), as the SDK's docs describe it: the
 * destination's answer (its body base64-encoded) and what was sent (the same), as JSON.
 */
export interface DeliveredAnswer {
  /** The destination's status; 0 when it never answered (timeout, network error). */
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface SourceMessage {
  messageId: string;
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string | Uint8Array;
  attempt: number;
  createdAt: number;
  notBefore?: number;
  /** The dead letter a failure callback is about. */
  dlqId?: string;
}

const utf8 = new TextEncoder();

/** Text as its UTF-8 bytes, or bytes as they are, base64-encoded. */
export function base64(value: string | Uint8Array): string {
  let binary = "";
  for (const b of typeof value === "string" ? utf8.encode(value) : value) binary += String.fromCharCode(b);
  return btoa(binary);
}

const listed = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]]));

export function callbackBody(meta: QstashMeta, source: SourceMessage, answer: DeliveredAnswer): string {
  return JSON.stringify({
    status: answer.status,
    header: listed(answer.headers),
    body: base64(answer.body),
    retried: source.attempt - 1,
    maxRetries: meta.retries,
    ...(source.dlqId !== undefined && { dlqId: source.dlqId }),
    sourceMessageId: source.messageId,
    ...(meta.topicName !== undefined && { topicName: meta.topicName }),
    ...(meta.endpointName !== undefined && { endpointName: meta.endpointName }),
    url: source.url,
    method: source.method,
    sourceHeader: listed(source.headers),
    sourceBody: base64(source.body),
    ...(source.notBefore !== undefined && { notBefore: source.notBefore }),
    createdAt: source.createdAt,
    ...(meta.scheduleId !== undefined && { scheduleId: meta.scheduleId }),
    ...(meta.callerIp !== undefined && { callerIP: meta.callerIp }),
  });
}

/** Which callback an attempt's outcome calls, if any: the callback on success, the failure callback once no attempt is left. */
export function callbackFor(meta: QstashMeta, ok: boolean, final: boolean): "callback" | "failureCallback" | null {
  if (meta.callbackOf !== undefined) return null; // a callback is not called back
  if (ok) return meta.callback ? "callback" : null;
  return final && meta.failureCallback ? "failureCallback" : null;
}
