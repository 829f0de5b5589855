/**
 * Which URLs edgecron may call. A scheduler makes outbound HTTP requests on its users' behalf,
 * which makes it a prime SSRF vector: a job whose target is 169.254.169.254 or 127.0.0.1 would
 * use edgecron to reach what its users cannot.
 *
 * Addresses are judged after the WHATWG URL parser has normalized them (decimal, octal, hex and
 * short IPv4 forms become a dotted quad; IPv6 is compressed), so every spelling of one address
 * gets one verdict. An IPv6 address that carries an IPv4 address (mapped, translated, NAT64,
 * IPv4-compatible) is judged as that IPv4 address, because that is where the packet goes.
 * 6to4 and Teredo also embed IPv4 addresses, but only through a relay; they are refused as
 * special-purpose ranges rather than decoded.
 *
 * DNS names are judged by name only: a Worker cannot resolve a name before fetching it. That
 * is enough on Cloudflare, whose network does not route Workers' fetches to private networks,
 * so a public name that resolves to a private address is not a path into one. Names that only
 * mean something on a local network (localhost, .local, single labels) are refused by name.
 */
import ipaddr from "ipaddr.js";

export interface TargetPolicy {
  /** For local development, where the job targets run on the same machine or network. */
  allowPrivate: boolean;
  /**
   * The deployment's own host (PUBLIC_URL's), which no job may call: it would reach edgecron's
   * own API (a job publishing jobs, a chain of them) with whatever credentials it carries.
   * `port` is null when every port of the host is the deployment (a public name, which
   * Cloudflare serves on each of its ports), and the port when the host is a local one that
   * serves other servers on other ports (local development).
   */
  own?: { hostname: string; port: string | null };
}

/** The guard's policy for a deployment's settings (src/config.ts). */
export function policyOf(settings: { allowPrivateTargets: boolean; publicUrl: string | undefined }): TargetPolicy {
  const policy: TargetPolicy = { allowPrivate: settings.allowPrivateTargets };
  if (!settings.publicUrl) return policy;
  const url = new URL(settings.publicUrl);
  // A host the strict guard refuses is a local one: loopback, private, a local name.
  const local = targetRefusal(url.href, { allowPrivate: false }) !== null;
  return { ...policy, own: { hostname: hostnameOf(url), port: local ? portOf(url) : null } };
}

const hostnameOf = (url: URL) => url.hostname.toLowerCase().replace(/\.+$/, "");
const portOf = (url: URL) => url.port || (url.protocol === "https:" ? "443" : "80");

const PRIVATE_HINT = "(set ALLOW_PRIVATE_TARGETS for local development)";
const METADATA_REFUSAL = "cloud metadata endpoints are never allowed";

// Metadata services hand out credentials for the machine they serve; no job needs them.
const METADATA_ADDRESSES = new Set(
  ["169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"].map((a) => ipaddr.parse(a).toString()),
);
const METADATA_HOSTS = new Set(["metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"]);

// Suffixes that only resolve inside a local network (RFC 6761, RFC 6762, RFC 8375, common use).
const LOCAL_SUFFIXES = [".local", ".internal", ".home.arpa", ".lan"];

const NAT64 = ipaddr.IPv6.parseCIDR("64:ff9b::/96");

const CLASS_NAMES: Record<string, string> = {
  loopback: "loopback",
  private: "private",
  linkLocal: "link-local",
  uniqueLocal: "unique-local",
  carrierGradeNat: "carrier-grade NAT",
  broadcast: "broadcast",
  multicast: "multicast",
  reserved: "reserved",
};

/** Why edgecron refuses to call this URL, or null when it may. */
export function targetRefusal(url: string, policy: TargetPolicy): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "must be an absolute http or https URL";
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return "only http and https targets are allowed";
  // They would end up in logs and run records, which are not meant to hold secrets.
  if (parsed.username !== "" || parsed.password !== "") {
    return "credentials in the URL are not allowed; send them as a header";
  }

  const { own } = policy;
  if (own && hostnameOf(parsed) === own.hostname && (own.port === null || portOf(parsed) === own.port)) {
    return `${parsed.host} is this deployment's own host: a job may not call edgecron itself`;
  }

  const host = parsed.hostname;
  if (host.startsWith("[")) {
    const literal = host.slice(1, -1);
    if (!ipaddr.IPv6.isValid(literal)) return `cannot classify address ${host}`;
    return ipv6Refusal(ipaddr.IPv6.parse(literal), policy);
  }
  // The parser keeps a trailing dot ("localhost.") and it names the same host.
  const name = host.toLowerCase().replace(/\.+$/, "");
  // ipaddr.js tells a name from an address by catching the error its parser throws, which costs
  // more than the rest of the guard together: its own pattern first, so that names never throw.
  if (FOUR_PART_DECIMAL.test(name) && ipaddr.IPv4.isValidFourPartDecimal(name)) return ipv4Refusal(ipaddr.IPv4.parse(name), name, policy);
  return nameRefusal(name, host, policy);
}

/** What ipaddr.js's isValidFourPartDecimal requires of a string besides parsing. */
const FOUR_PART_DECIMAL = /^(0|[1-9]\d*)(\.(0|[1-9]\d*)){3}$/;

function ipv4Refusal(address: ipaddr.IPv4, shown: string, policy: TargetPolicy): string | null {
  if (METADATA_ADDRESSES.has(address.toString())) return METADATA_REFUSAL;
  const range = address.range();
  // Linux treats connecting to 0.0.0.0 (and the rest of 0/8 on some kernels) as the local host.
  if (range === "unspecified") return `unspecified address ${shown} is never allowed: it reaches the local host`;
  return rangeRefusal(range, shown, policy);
}

function ipv6Refusal(address: ipaddr.IPv6, policy: TargetPolicy): string | null {
  const shown = address.toString();
  if (METADATA_ADDRESSES.has(shown)) return METADATA_REFUSAL;
  const embedded = embeddedIPv4(address);
  if (embedded) return ipv4Refusal(embedded, `${embedded.toString()} (in ${shown})`, policy);
  const range = address.range();
  if (range === "unspecified") return `unspecified address ${shown} is never allowed: it reaches the local host`;
  return rangeRefusal(range, shown, policy);
}

/** The IPv4 address an IPv6 address delivers to, when it is one of the forms that carry one. */
function embeddedIPv4(address: ipaddr.IPv6): ipaddr.IPv4 | null {
  const range = address.range();
  const ipv4Compatible = range === "unicast" && address.parts.slice(0, 6).every((part) => part === 0);
  const carries = range === "ipv4Mapped" || range === "rfc6145" || address.match(NAT64) || ipv4Compatible;
  if (!carries) return null;
  const [high = 0, low = 0] = address.parts.slice(6);
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
}

function rangeRefusal(range: string, shown: string, policy: TargetPolicy): string | null {
  if (range === "unicast" || policy.allowPrivate) return null;
  const kind = CLASS_NAMES[range] ?? `special-purpose (${range})`;
  return `${kind} address ${shown} is not allowed ${PRIVATE_HINT}`;
}

function nameRefusal(name: string, shown: string, policy: TargetPolicy): string | null {
  if (METADATA_HOSTS.has(name)) return METADATA_REFUSAL;
  if (policy.allowPrivate) return null;
  const dotted = `.${name}`;
  if (dotted.endsWith(".localhost")) {
    return `loopback hostname ${shown} is not allowed ${PRIVATE_HINT}`;
  }
  if (LOCAL_SUFFIXES.some((suffix) => dotted.endsWith(suffix))) {
    return `local-network hostname ${shown} is not allowed ${PRIVATE_HINT}`;
  }
  // A name without a dot is completed from the resolver's search domain, i.e. an internal one.
  if (!name.includes(".")) return `single-label hostname ${shown} is not allowed ${PRIVATE_HINT}`;
  return null;
}
