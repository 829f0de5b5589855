/**
 * The SSRF guard, as a table: each URL with its verdict when private targets are refused (the
 * default) and when they are allowed (local development). A verdict is null (edgecron may call
 * the URL) or a fragment of the refusal, which names the address class and the address.
 * The guard is pure; nothing here touches the network.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { policyOf, targetRefusal } from "../../src/security/target-guard";

const METADATA = "cloud metadata endpoints are never allowed";
const NOT_URL = "must be an absolute http or https URL";
const SCHEME = "only http and https targets are allowed";
const CREDENTIALS = "credentials in the URL are not allowed; send them as a header";

type Case = readonly [url: string, strict: string | null, permissive: string | null];

const cases: Case[] = [
  // Loopback, in every spelling the URL parser folds into 127.0.0.1.
  ["http://127.0.0.1/", "loopback address 127.0.0.1", null],
  ["http://127.1/", "loopback address 127.0.0.1", null],
  ["http://127.0.0.1:8080/hook", "loopback address 127.0.0.1", null],
  ["http://127.0.0.1./", "loopback address 127.0.0.1", null],
  ["http://2130706433/", "loopback address 127.0.0.1", null],
  ["http://0177.0.0.1/", "loopback address 127.0.0.1", null],
  ["http://0x7f000001/", "loopback address 127.0.0.1", null],
  ["http://0x7f.0.0.1/", "loopback address 127.0.0.1", null],
  ["http://0x7F.1/", "loopback address 127.0.0.1", null],
  ["http://017700000001/", "loopback address 127.0.0.1", null],
  ["http://127.0.0.0x1/", "loopback address 127.0.0.1", null],
  ["http://%31%32%37.0.0.1/", "loopback address 127.0.0.1", null],
  ["http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "loopback address 127.0.0.1", null],
  ["http://127.255.255.254/", "loopback address 127.255.255.254", null],
  ["http://localhost/", "loopback hostname localhost", null],
  ["http://localhost:8787/", "loopback hostname localhost", null],
  ["http://LOCALHOST./", "loopback hostname localhost.", null],
  ["http://\u24dbocalhost/", "loopback hostname localhost", null],
  ["http://foo.localhost/", "loopback hostname foo.localhost", null],
  ["http://[::1]/", "loopback address ::1", null],
  ["http://[0:0:0:0:0:0:0:1]/", "loopback address ::1", null],
  // IPv6 forms that deliver to an IPv4 address are judged as that address.
  ["http://[::ffff:127.0.0.1]/", "loopback address 127.0.0.1 (in ::ffff:7f00:1)", null],
  ["http://[::ffff:7f00:1]/", "loopback address 127.0.0.1 (in ::ffff:7f00:1)", null],
  ["http://[::ffff:10.0.0.1]/", "private address 10.0.0.1 (in ::ffff:a00:1)", null],
  ["http://[::ffff:0:127.0.0.1]/", "loopback address 127.0.0.1 (in ::ffff:0:7f00:1)", null],
  ["http://[64:ff9b::127.0.0.1]/", "loopback address 127.0.0.1 (in 64:ff9b::7f00:1)", null],
  ["http://[::127.0.0.1]/", "loopback address 127.0.0.1 (in ::7f00:1)", null],
  ["http://[::ffff:1.1.1.1]/", null, null],
  ["http://[64:ff9b::1.1.1.1]/", null, null],
  // Private, link-local, unique-local, carrier-grade NAT.
  ["http://10.0.0.1/", "private address 10.0.0.1", null],
  ["http://10.255.255.255/", "private address 10.255.255.255", null],
  ["http://012.1/", "private address 10.0.0.1", null],
  ["http://172.16.0.1/", "private address 172.16.0.1", null],
  ["http://172.31.255.255/", "private address 172.31.255.255", null],
  ["http://192.168.1.1/", "private address 192.168.1.1", null],
  ["http://169.254.1.1/", "link-local address 169.254.1.1", null],
  ["http://[fe80::1]/", "link-local address fe80::1", null],
  ["http://[fc00::1]/", "unique-local address fc00::1", null],
  ["http://[fd12:3456::1]/", "unique-local address fd12:3456::1", null],
  ["http://100.64.0.1/", "carrier-grade NAT address 100.64.0.1", null],
  ["http://100.127.255.255/", "carrier-grade NAT address 100.127.255.255", null],
  // Broadcast, multicast, reserved and other special-purpose ranges.
  ["http://224.0.0.1/", "multicast address 224.0.0.1", null],
  ["http://[ff02::1]/", "multicast address ff02::1", null],
  ["http://255.255.255.255/", "broadcast address 255.255.255.255", null],
  ["http://192.0.0.8/", "reserved address 192.0.0.8", null],
  ["http://192.0.2.1/", "reserved address 192.0.2.1", null],
  ["http://198.18.0.1/", "reserved address 198.18.0.1", null],
  ["http://240.0.0.1/", "reserved address 240.0.0.1", null],
  ["http://[2001:db8::1]/", "reserved address 2001:db8::1", null],
  ["http://[2002:7f00:1::]/", "special-purpose (6to4) address 2002:7f00:1::", null],
  ["http://[2001::1]/", "special-purpose (teredo) address 2001::1", null],
  ["http://[fec0::1]/", "special-purpose (deprecatedSiteLocal) address fec0::1", null],
  // The unspecified address reaches the local host: never, not even in development.
  ["http://0.0.0.0/", "unspecified address 0.0.0.0 is never allowed", "unspecified address 0.0.0.0 is never allowed"],
  ["http://0/", "unspecified address 0.0.0.0 is never allowed", "unspecified address 0.0.0.0 is never allowed"],
  ["http://0.1.2.3/", "unspecified address 0.1.2.3 is never allowed", "unspecified address 0.1.2.3 is never allowed"],
  ["http://[::]/", "unspecified address :: is never allowed", "unspecified address :: is never allowed"],
  ["http://[::ffff:0.0.0.0]/", "unspecified address 0.0.0.0 (in ::ffff:0:0)", "unspecified address 0.0.0.0"],
  // Cloud metadata: never.
  ["http://169.254.169.254/latest/meta-data/", METADATA, METADATA],
  ["http://2852039166/", METADATA, METADATA],
  ["http://[::ffff:169.254.169.254]/", METADATA, METADATA],
  ["http://[64:ff9b::169.254.169.254]/", METADATA, METADATA],
  ["http://169.254.170.2/v2/credentials", METADATA, METADATA],
  ["http://100.100.100.200/", METADATA, METADATA],
  ["http://[fd00:ec2::254]/", METADATA, METADATA],
  ["http://[fd00:ec2:0::254]/", METADATA, METADATA],
  ["http://metadata.google.internal/computeMetadata/v1/", METADATA, METADATA],
  ["http://Metadata.Google.Internal./", METADATA, METADATA],
  ["http://metadata.goog/", METADATA, METADATA],
  ["http://metadata/", METADATA, METADATA],
  ["http://instance-data/", METADATA, METADATA],
  ["http://instance-data.ec2.internal/", METADATA, METADATA],
  // Names that only mean something on a local network.
  ["http://printer.local/", "local-network hostname printer.local", null],
  ["http://db.internal/", "local-network hostname db.internal", null],
  ["http://nas.home.arpa/", "local-network hostname nas.home.arpa", null],
  ["http://router.lan./", "local-network hostname router.lan.", null],
  ["http://intranet/", "single-label hostname intranet", null],
  ["http://intranet./", "single-label hostname intranet.", null],
  // Not an http(s) URL, or one carrying credentials: refused whatever the policy.
  ["ftp://example.com/", SCHEME, SCHEME],
  ["file:///etc/passwd", SCHEME, SCHEME],
  ["gopher://x", SCHEME, SCHEME],
  ["javascript:alert(1)", SCHEME, SCHEME],
  ["data:text/plain,hi", SCHEME, SCHEME],
  ["ws://example.com/", SCHEME, SCHEME],
  ["http://user:pw@example.com/", CREDENTIALS, CREDENTIALS],
  ["http://user@example.com/", CREDENTIALS, CREDENTIALS],
  ["http://:pw@example.com/", CREDENTIALS, CREDENTIALS],
  ["not a url", NOT_URL, NOT_URL],
  ["", NOT_URL, NOT_URL],
  ["/relative/path", NOT_URL, NOT_URL],
  ["example.com", NOT_URL, NOT_URL],
  ["http://256.0.0.1/", NOT_URL, NOT_URL],
  ["http://[fe80::1%25eth0]/", NOT_URL, NOT_URL],
  // Public targets.
  ["https://example.com/x", null, null],
  ["https://EXAMPLE.com./x", null, null],
  ["http://example.com:8080/hook?x=1", null, null],
  ["https://api.example.co.uk/v1", null, null],
  ["http://93.184.216.34/", null, null],
  ["https://1.1.1.1", null, null],
  ["https://[2606:4700::1111]/", null, null],
  ["http://172.15.255.255/", null, null],
  ["http://172.32.0.1/", null, null],
  ["http://192.169.0.1/", null, null],
  ["http://100.63.255.255/", null, null],
  ["http://100.128.0.1/", null, null],
  ["http://11.0.0.1/", null, null],
  // Judged by name: a public name is not a path into a private network from Cloudflare.
  ["http://127.0.0.1.nip.io/", null, null],
];

describe("targetRefusal", () => {
  it.each(cases)("%s → %j, allowing private targets → %j", (url, strict, permissive) => {
    for (const [allowPrivate, expected] of [
      [false, strict],
      [true, permissive],
    ] as const) {
      const refusal = targetRefusal(url, { allowPrivate });
      if (expected === null) expect(refusal, `allowPrivate: ${allowPrivate}`).toBeNull();
      else expect(refusal, `allowPrivate: ${allowPrivate}`).toContain(expected);
    }
  });

  it("points at ALLOW_PRIVATE_TARGETS only when that flag would help", () => {
    expect(targetRefusal("http://10.0.0.1/", { allowPrivate: false })).toBe(
      "private address 10.0.0.1 is not allowed (set ALLOW_PRIVATE_TARGETS for local development)",
    );
    expect(targetRefusal("http://0.0.0.0/", { allowPrivate: false })).not.toContain("ALLOW_PRIVATE_TARGETS");
    expect(targetRefusal("http://169.254.169.254/", { allowPrivate: false })).toBe(METADATA);
  });

  it("refuses all of 127.0.0.0/8 written as a 32-bit decimal host", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0x7f000000, max: 0x7fffffff }), (n) => {
        expect(targetRefusal(`http://${n}/`, { allowPrivate: false })).toMatch(/^loopback address 127\./);
        expect(targetRefusal(`http://${n}/`, { allowPrivate: true })).toBeNull();
      }),
    );
  });

  it("judges an IPv4-mapped IPv6 address as its IPv4 address", () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.boolean(), (ip, allowPrivate) => {
        const mapped = targetRefusal(`http://[::ffff:${ip}]/`, { allowPrivate });
        const plain = targetRefusal(`http://${ip}/`, { allowPrivate });
        expect(mapped === null).toBe(plain === null);
      }),
    );
  });

  it("gives every spelling of an IPv4 address the same verdict", () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.boolean(), (ip, allowPrivate) => {
        const n = ip.split(".").reduce((sum, octet) => sum * 256 + Number(octet), 0);
        const plain = targetRefusal(`http://${ip}/`, { allowPrivate });
        expect(targetRefusal(`http://${n}/`, { allowPrivate })).toBe(plain);
        expect(targetRefusal(`http://0x${n.toString(16)}/`, { allowPrivate })).toBe(plain);
        expect(targetRefusal(`http://0${n.toString(8)}/`, { allowPrivate })).toBe(plain);
      }),
    );
  });
});

describe("the deployment's own host", () => {
  const OWN = "own host: a job may not call edgecron itself";
  const deployed = policyOf({ allowPrivateTargets: false, publicUrl: "https://Cron.Example.com/" });
  const local = policyOf({ allowPrivateTargets: true, publicUrl: "http://localhost:8787" });

  it.each([
    ["https://cron.example.com/v1/jobs", deployed, OWN],
    ["http://cron.example.com/v2/publish/https://x.example", deployed, OWN],
    ["https://CRON.example.com./v1/runs/run_x/complete", deployed, OWN],
    // Cloudflare serves a proxied host on other ports too: the port does not make it another server.
    ["https://cron.example.com:8443/v1/jobs", deployed, OWN],
    ["https://other.example.com/v1/jobs", deployed, null],
    ["https://sub.cron.example.com/", deployed, null],
    // Local development: the host is a loopback name, which serves many servers, one per port.
    ["http://localhost:8787/v1/jobs", local, OWN],
    ["http://localhost:9000/hook", local, null],
    ["http://127.0.0.1:8787/v1/jobs", local, null],
  ] as const)("%s", (url, policy, refusal) => {
    const verdict = targetRefusal(url, policy);
    if (refusal === null) expect(verdict).toBeNull();
    else expect(verdict).toContain(refusal);
  });

  it("without PUBLIC_URL, the guard knows no own host", () => {
    expect(targetRefusal("https://cron.example.com/v1/jobs", policyOf({ allowPrivateTargets: false, publicUrl: undefined }))).toBeNull();
  });
});
