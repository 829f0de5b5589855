import type { PermitAsk } from "../gate/grants";
import type { FailureKind } from "../model/run-states";
import type { Dispatch, KeyedDispatch } from "../protocol/queue-messages";
import type { RunRow } from "../protocol/stored-rows";

/** What the run ledger (ledger.ts) takes from the rest of the shard: outcomes as settled, and the outbox dispatches go out through. */

/** What a settled outcome says, whoever reported it: the consumer, or the target itself. */
export interface Settled {
  ok: boolean;
  status: number | null;
  error: string | null;
  retryAfterMs?: number;
  result?: string | null;
  kind?: FailureKind;
  /** When the consumer started the request (a consumer's report only). */
  startedAt?: number;
}

/**
 * What the ledger needs of dispatch (dispatch.ts, kept in memory: invariant 3): to send after
 * commit, to take back what the Queue has not taken yet, and to extend a tenant permit.
 */
export interface DispatchOutbox {
  send(dispatch: KeyedDispatch): void;
  /** A resend that goes out only once its run's permit is confirmed at its gate; refused, its attempt ends as a lost one (ledger.ts, `endForPermit`). */
  sendOnPermit(dispatch: KeyedDispatch, check: PermitCheck): void;
  /** The job's dispatches not yet taken by the Queue. */
  unsentOf(jobId: string): Dispatch[];
  /** Drops a dispatch not yet taken by the Queue: it will not be sent. */
  withdraw(dispatch: Dispatch): void;
  /** Extends a run's tenant permit at the next flush. */
  renewPermitLater(run: Pick<RunRow, "permit" | "jobId">, leaseMs: number): void;
}

/** What a resend's permit is confirmed with (`sendOnPermit`): its tenant's gate, the ask an admission makes for it, until when it must hold. */
export interface PermitCheck {
  tenantId: string;
  ask: PermitAsk;
  until: number;
}
