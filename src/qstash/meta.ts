import type { Sealed } from "../security/sealing";

/**
 * What a QStash message carries besides its target: kept beside the target, so that the
 * consumer delivers it as QStash does (src/qstash/delivery.ts) without asking D1. A job whose
 * target has it is a message or a schedule of the /v2 surface. In the clear but for its
 * callbacks, whose URLs and forwarded headers are sealed (src/qstash/sealed-callbacks.ts).
 */
export interface CallbackOptions {
  url: string;
  method?: string;
  retries?: number;
  timeoutMs?: number;
  delayMs?: number;
  /** Upstash-Callback-Forward-* (or Failure-Callback-Forward-*): headers the callback is sent with. */
  headers?: Record<string, string>;
}

/** A callback as stored: the origin of its URL readable, the rest sealed under its tenant. */
export interface SealedCallback {
  origin: string;
  secrets: Sealed;
}

export interface QstashMeta {
  /** Retries after the first attempt (Upstash-Retries; QStash's default is 3). */
  retries: number;
  /** Upstash-Retry-Delay's expression; absent: QStash's exponential default. */
  retryDelay?: string;
  /** As published; once stored, sealed (a message stored before callbacks were sealed: in clear). */
  callback?: CallbackOptions | SealedCallback;
  failureCallback?: CallbackOptions | SealedCallback;
  scheduleId?: string;
  topicName?: string;
  endpointName?: string;
  queueName?: string;
  label?: string;
  flowControlKey?: string;
  callerIp?: string;
  /** A callback's own message: what it reports on, so that it is not itself called back. */
  callbackOf?: string;
}
