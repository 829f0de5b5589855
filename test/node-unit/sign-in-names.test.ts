import { describe, expect, it } from "vitest";
import { fullBudget, keepBudget } from "../../src/gate/failure-budget";
import { addressName, prefixName, THROTTLE_OBJECTS, throttleObjectOf } from "../../src/gate/sign-in-names";

describe("what failed sign-ins are counted against", () => {
  it("an IPv4 address alone, and IPv4-mapped IPv6 as that IPv4 address", () => {
    expect(addressName("203.0.113.7")).toBe("address:203.0.113.7");
    expect(addressName("203.0.113.8")).not.toBe(addressName("203.0.113.7"));
    expect(addressName("::ffff:203.0.113.7")).toBe("address:203.0.113.7");
    expect(addressName("::ffff:cb00:7107")).toBe("address:203.0.113.7");
  });

  it("an IPv6 address by its /64, however it is written", () => {
    const name = addressName("2001:db8:41:3::1");
    expect(name).toBe("address:2001:db8:41:3::/64");
    for (const same of ["2001:db8:41:3:ffff:ffff:ffff:ffff", "2001:0DB8:0041:0003:0:0:0:9", "2001:db8:41:3:a:b:c:d"]) {
      expect(addressName(same), same).toBe(name);
    }
    expect(addressName("2001:db8:41:4::1")).not.toBe(name);
    expect(addressName("2001:db8:41:3::1%eth0")).toBe(name);
  });

  it("what does not parse shares one name", () => {
    expect(addressName("not an address")).toBe("address:unparsed");
    expect(addressName("")).toBe(addressName("also not"));
  });

  it("every name is kept by one of THROTTLE_OBJECTS objects, the same one each time", () => {
    const names = [
      ...Array.from({ length: 5_000 }, (_, i) => addressName(`2001:db8:${(i >> 8).toString(16)}:${(i & 0xff).toString(16)}::1`)),
      ...Array.from({ length: 5_000 }, (_, i) => addressName(`10.${(i >> 16) & 0xff}.${(i >> 8) & 0xff}.${i & 0xff}`)),
      ...Array.from({ length: 5_000 }, (_, i) => prefixName(`ek_${i.toString(36).padStart(4, "0")}`)),
    ];
    expect(new Set(names).size).toBe(names.length);
    const allowed = new Set(Array.from({ length: THROTTLE_OBJECTS }, (_, i) => `throttle-${i}`));
    const used = new Set(names.map(throttleObjectOf));
    for (const object of used) expect(allowed.has(object), object).toBe(true);
    // Spread over all of them: no object keeps most of the failures.
    expect(used.size).toBe(THROTTLE_OBJECTS);
    for (const name of names.slice(0, 100)) expect(throttleObjectOf(name)).toBe(throttleObjectOf(name));
  });
});

describe("an object's budgets", () => {
  it("are at most `max`, the least recently spent dropped first", () => {
    const budgets = new Map<string, ReturnType<typeof fullBudget>>();
    const budget = fullBudget({ capacity: 20, periodMs: 60_000 }, 0);
    for (let i = 0; i < 10; i++) keepBudget(budgets, `n${i}`, budget, 5);
    expect([...budgets.keys()]).toEqual(["n5", "n6", "n7", "n8", "n9"]);
    // Spending again makes a name the newest, so a client still failing is the last to be forgiven.
    keepBudget(budgets, "n5", budget, 5);
    keepBudget(budgets, "n10", budget, 5);
    expect([...budgets.keys()]).toEqual(["n7", "n8", "n9", "n5", "n10"]);
  });
});
