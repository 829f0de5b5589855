import { LEASE_GRACE_MS } from "../protocol/queue-messages";
import { deliveryAllowance } from "./leases";

/**
 * How long each kind of lease lasts: the one place that says it (docs/guarantees.md, "Leases").
 * Every lease ends LEASE_GRACE_MS after the attempt could last finish, for its outcome's report.
 */

/**
 * How long a renewal keeps an order waiting for a connection at its consumer
 * (src/consumer/lease-keeper.ts) before it must be renewed again: long enough that a batch's
 * renewals are a call to the shard every half minute or so, short enough that a consumer that
 * dies while its orders wait leaves them lost for no longer than a claim timeout would.
 */
export const WAITING_RENEWAL_MS = 30_000;

/** A dispatch's lease: its time to reach a consumer (doubling with each resend), the attempt's timeout, the grace. */
export function dispatchLeaseMs(claimTimeoutMs: number, redispatches: number, timeoutMs: number): number {
  return deliveryAllowance(claimTimeoutMs, redispatches) + timeoutMs + LEASE_GRACE_MS;
}

/** An attempt whose target has it (a 202's, a heartbeat's permit): its timeout and the grace. */
export function runningLeaseMs(timeoutMs: number): number {
  return timeoutMs + LEASE_GRACE_MS;
}

/** An order waiting at its consumer for a connection, renewed: a while more to wait, then the attempt's timeout and the grace. */
export function waitingLeaseMs(timeoutMs: number): number {
  return WAITING_RENEWAL_MS + timeoutMs + LEASE_GRACE_MS;
}
