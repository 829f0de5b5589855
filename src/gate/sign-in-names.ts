import ipaddr from "ipaddr.js";
import { fnv1a32 } from "../model/ids";

/**
 * What failed sign-ins are counted against, and which SignInThrottle object keeps each count.
 * Pure: the names are computed from the request alone.
 */

/**
 * A client address as the throttle counts it: an IPv4 address alone (IPv4-mapped IPv6 is that
 * IPv4 address), an IPv6 address by its /64. One host is given a whole /64 as a rule, so
 * counting IPv6 addresses one by one would let it try 2^64 addresses' worth. What does not parse
 * (Cloudflare's edge always sends an address) shares one name, so it escapes nothing.
 */
export function addressName(raw: string): string {
  if (!ipaddr.isValid(raw)) return "address:unparsed";
  const address = ipaddr.process(raw);
  if (address.kind() === "ipv4") return `address:${address.toString()}`;
  const network = new ipaddr.IPv6([...(address as ipaddr.IPv6).parts.slice(0, 4), 0, 0, 0, 0]);
  return `address:${network.toString()}/64`;
}

export const prefixName = (keyPrefix: string): string => `prefix:${keyPrefix}`;

/**
 * How many SignInThrottle objects hold the budgets, whatever the number of addresses and
 * prefixes: with one object per name, a client rotating addresses made an object per address.
 * 64 spreads a deployment's failures over enough objects that none is a hot spot, while a
 * throttled client's tries stop reaching them at all (src/api/sign-in-throttle.ts).
 */
export const THROTTLE_OBJECTS = 64;

/** The object that keeps `name`'s budget: one of THROTTLE_OBJECTS, by FNV-1a of the name, stable across isolates. */
export function throttleObjectOf(name: string): string {
  return `throttle-${fnv1a32(name) % THROTTLE_OBJECTS}`;
}

/** The object counting refusals for the metrics; not one of the throttle objects. */
export const TOTALS_OBJECT = "totals";
