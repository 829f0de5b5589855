import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { coversJob, formatScopes, grants, parseScopes, SCOPES, within } from "../../src/model/scopes";

describe("scopes", () => {
  it("each scope includes the ones before it, and none after", () => {
    expect(grants(["read"], "read")).toBe(true);
    expect(grants(["read"], "write")).toBe(false);
    expect(grants(["write"], "read")).toBe(true);
    expect(grants(["write"], "admin")).toBe(false);
    expect(grants(["admin"], "write")).toBe(true);
    expect(grants([], "read")).toBe(false);
  });

  it("the stored column reads back as written; unknown words grant nothing", () => {
    fc.assert(
      fc.property(fc.subarray([...SCOPES]), (scopes) => {
        expect(parseScopes(formatScopes(scopes))).toEqual(scopes);
      }),
    );
    expect(parseScopes("read,root,ADMIN")).toEqual(["read"]);
  });

  it("a job prefix covers only names that start with it; a nameless job is under none", () => {
    expect(coversJob({ scopes: ["read"], jobPrefix: "deploy-" }, "deploy-web")).toBe(true);
    expect(coversJob({ scopes: ["read"], jobPrefix: "deploy-" }, "web-deploy-")).toBe(false);
    expect(coversJob({ scopes: ["read"], jobPrefix: "deploy-" }, null)).toBe(false);
    expect(coversJob({ scopes: ["read"], jobPrefix: null }, null)).toBe(true);
  });

  it("a key makes only keys that do no more than it: no higher scope, no wider prefix", () => {
    const held = { scopes: ["write"] as const, jobPrefix: "deploy-" };
    expect(within({ scopes: ["read"], jobPrefix: "deploy-web-" }, held)).toBe(true);
    expect(within({ scopes: ["admin"], jobPrefix: "deploy-" }, held)).toBe(false);
    expect(within({ scopes: ["read"], jobPrefix: null }, held)).toBe(false);
    expect(within({ scopes: ["read"], jobPrefix: "dep" }, held)).toBe(false);
    expect(within({ scopes: ["admin"], jobPrefix: null }, { scopes: ["admin"], jobPrefix: null })).toBe(true);
  });
});
