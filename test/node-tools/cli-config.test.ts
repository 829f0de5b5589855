import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defaultConfigPath, readConfigFile, resolveConfig } from "../../cli/config.ts";
import { UsageError } from "../../cli/exit.ts";

describe("the CLI's configuration", () => {
  const file = { url: "http://127.0.0.1:1", token: "from-file" };
  const env = { EDGECRON_URL: "http://127.0.0.1:2", EDGECRON_TOKEN: "from-env" };

  it("takes each setting from flags, else the environment, else the file", () => {
    expect(resolveConfig({}, {}, file, "f")).toEqual(file);
    expect(resolveConfig({}, env, file, "f")).toEqual({ url: "http://127.0.0.1:2", token: "from-env" });
    expect(resolveConfig({ token: "from-flag" }, env, file, "f")).toEqual({ url: "http://127.0.0.1:2", token: "from-flag" });
    expect(resolveConfig({ url: "http://127.0.0.1:3" }, { EDGECRON_TOKEN: "from-env" }, {}, "f")).toEqual({
      url: "http://127.0.0.1:3",
      token: "from-env",
    });
  });

  it("says what is missing, and refuses a URL that is not http(s)", () => {
    expect(() => resolveConfig({}, {}, { url: file.url }, "/x/config.json")).toThrow(
      /a token \(--token or EDGECRON_TOKEN\).*\/x\/config\.json/,
    );
    expect(() => resolveConfig({ url: "127.0.0.1:8787", token: "t" }, {}, {}, "f")).toThrow(UsageError);
  });

  it("reads a config file, which must exist when named and hold strings", () => {
    const dir = mkdtempSync(join(tmpdir(), "edgecron-config-"));
    const path = join(dir, "config.json");
    expect(readConfigFile(path, false)).toEqual({});
    expect(() => readConfigFile(path, true)).toThrow(/no config file/);
    writeFileSync(path, JSON.stringify(file));
    expect(readConfigFile(path, true)).toEqual(file);
    writeFileSync(path, JSON.stringify({ token: 5 }));
    expect(() => readConfigFile(path, true)).toThrow(/"token" must be a string/);
    writeFileSync(path, "{ not json");
    expect(() => readConfigFile(path, false)).toThrow(/is not JSON/);
  });

  it("lives under XDG_CONFIG_HOME when it is set", () => {
    expect(defaultConfigPath({ XDG_CONFIG_HOME: "/xdg" })).toBe("/xdg/edgecron/config.json");
    expect(defaultConfigPath({})).toMatch(/\/\.config\/edgecron\/config\.json$/);
  });
});
