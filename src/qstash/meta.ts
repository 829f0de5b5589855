/**
 * What a QStash message carries besides its target: kept beside the target (in the clear: none
 * of it is a secret), so that the consumer delivers it as QStash does (src/qstash/delivery.ts)
 * without asking D1. A job whose target has it is a message or a schedule of the /v2 surface.
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

export interface QstashMeta {
  /** Retries after the first attempt (Upstash-Retries; QStash's default is 3). */
  retries: number;
  /** Upstash-Retry-Delay's expression; absent: QStash's exponential default. */
  retryDelay?: string;
  callback?: CallbackOptions;
  failureCallback?: CallbackOptions;
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
