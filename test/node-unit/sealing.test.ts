import { describe, expect, it } from "vitest";
import { loadKeyRing, open, type Sealed, seal } from "../../src/security/sealing";

function randomKey(bytes = 32): string {
  return btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(bytes))));
}

const toBase64url = (b64: string) => b64.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

describe("sealing", () => {
  it("round-trips objects, strings and unicode", async () => {
    const ring = await loadKeyRing(`k1:${randomKey()}`);
    const values = [
      { headers: { Authorization: "Bearer s3cr3t" }, body: '{"a":1}' },
      "plain string",
      "ünïcødé 🗝️ 鍵 \u0000 end",
      [1, null, true, { nested: ["x"] }],
      42,
      null,
    ];
    for (const value of values) {
      const sealed = await seal(ring, value, "job_1");
      expect(sealed.kid).toBe("k1");
      expect(JSON.stringify(sealed)).not.toContain("s3cr3t");
      expect(await open(ring, sealed, "job_1")).toEqual(value);
    }
  });

  it("uses a fresh 12-byte IV every time", async () => {
    const ring = await loadKeyRing(`k1:${randomKey()}`);
    const a = await seal(ring, "same", "job_1");
    const b = await seal(ring, "same", "job_1");
    expect(a.iv).not.toBe(b.iv);
    expect(a.data).not.toBe(b.data);
    expect(a.iv).toMatch(/^[A-Za-z0-9_-]{16}$/); // 12 bytes, base64url, no padding
    expect(a.data).toMatch(/^[A-Za-z0-9_-]+$/);
  });

  it("fails under another context", async () => {
    const ring = await loadKeyRing(`k1:${randomKey()}`);
    const sealed = await seal(ring, { secret: "x" }, "job_1");
    await expect(open(ring, sealed, "job_2")).rejects.toThrow("cannot decrypt: ciphertext or context does not match");
  });

  it("fails when the ciphertext or IV is tampered with", async () => {
    const ring = await loadKeyRing(`k1:${randomKey()}`);
    const sealed = await seal(ring, { secret: "x" }, "job_1");
    const flip = (text: string, i: number) => text.slice(0, i) + (text[i] === "A" ? "B" : "A") + text.slice(i + 1);
    for (const i of [0, Math.floor(sealed.data.length / 2), sealed.data.length - 2]) {
      await expect(open(ring, { ...sealed, data: flip(sealed.data, i) }, "job_1")).rejects.toThrow(
        "cannot decrypt: ciphertext or context does not match",
      );
    }
    await expect(open(ring, { ...sealed, iv: flip(sealed.iv, 3) }, "job_1")).rejects.toThrow("does not match");
    await expect(open(ring, { ...sealed, data: sealed.data.slice(0, -4) }, "job_1")).rejects.toThrow("cannot decrypt");
    await expect(open(ring, { ...sealed, iv: "short" }, "job_1")).rejects.toThrow("cannot decrypt: malformed ciphertext");
    await expect(open(ring, { ...sealed, data: "not base64!" }, "job_1")).rejects.toThrow("cannot decrypt: malformed ciphertext");
  });

  it("fails for an unknown key id, and for a key id whose key is different", async () => {
    const ring = await loadKeyRing(`k1:${randomKey()}`);
    const sealed = await seal(ring, "x", "job_1");
    await expect(open(ring, { ...sealed, kid: "k0" }, "job_1")).rejects.toThrow("cannot decrypt: unknown key id k0");
    const other = await loadKeyRing(`k1:${randomKey()}`);
    await expect(open(other, sealed, "job_1")).rejects.toThrow("cannot decrypt: ciphertext or context does not match");
  });

  it("rotates: a new first key seals, old keys still open", async () => {
    const oldKey = randomKey();
    const newKey = toBase64url(randomKey()); // base64url accepted too
    const before = await loadKeyRing(`k1:${oldKey}`);
    const sealedOld: Sealed = await seal(before, { token: "old" }, "job_1");

    const after = await loadKeyRing(`k2:${newKey},k1:${oldKey}`);
    expect(after.current).toBe("k2");
    expect(await open(after, sealedOld, "job_1")).toEqual({ token: "old" });
    const sealedNew = await seal(after, { token: "new" }, "job_1");
    expect(sealedNew.kid).toBe("k2");
    expect(await open(after, sealedNew, "job_1")).toEqual({ token: "new" });
    // Once k1 is dropped, values still under it no longer open: re-seal before dropping.
    const dropped = await loadKeyRing(`k2:${newKey}`);
    await expect(open(dropped, sealedOld, "job_1")).rejects.toThrow("unknown key id k1");
  });

  it("accepts surrounding whitespace, as pasted secrets often have", async () => {
    const key = randomKey();
    const ring = await loadKeyRing(` k1:${key} ,\n k2:${randomKey()}\n`);
    expect(ring.current).toBe("k1");
    expect([...ring.keys.keys()]).toEqual(["k1", "k2"]);
  });

  it("caches a parsed ring per spec", async () => {
    const spec = `k1:${randomKey()}`;
    expect(await loadKeyRing(spec)).toBe(await loadKeyRing(spec));
  });

  it("rejects malformed specs without echoing key material", async () => {
    const key = randomKey();
    const short = randomKey(16);
    const cases: [string | undefined, RegExp][] = [
      [undefined, /not set/],
      ["", /not set/],
      ["  ", /not set/],
      [key, /entry 1 of 1: expected "kid:base64key"/],
      [`k1:${key},`, /entry 2 of 2: expected "kid:base64key"/],
      ["k1:", /entry 1 of 1: key is not valid base64/],
      [`k1:${key.slice(0, 10)}!@#${key.slice(13)}`, /key is not valid base64/],
      [`k1:${key.slice(0, 20)} ${key.slice(20)}`, /key is not valid base64/],
      [`k1:${short}`, /key must be 32 bytes, got 16/],
      [`k1:${randomKey(33)}`, /key must be 32 bytes, got 33/],
      [`k1:${key},k1:${randomKey()}`, /entry 2 of 2: duplicate key id/],
      [`k 1:${key}`, /entry 1 of 1: key id must be 1-32 characters/],
      [`k.1:${key}`, /key id must be 1-32 characters/],
      [`:${key}`, /key id must be 1-32 characters/],
      [`${"k".repeat(33)}:${key}`, /key id must be 1-32 characters/],
      // A key split at a colon, its first part looking like a key id, must not show up either.
      [`${key.slice(0, 20).replace(/[+/]/g, "x")}:${key.slice(20)}`, /./],
    ];
    for (const [spec, message] of cases) {
      const error = await loadKeyRing(spec).then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect(error, `spec ${JSON.stringify(spec)}`).toBeInstanceOf(Error);
      expect(error!.message).toMatch(message);
      for (const secret of [key, short, key.slice(0, 20).replace(/[+/]/g, "x"), key.slice(20)]) {
        expect(error!.message).not.toContain(secret);
      }
    }
  });
});
