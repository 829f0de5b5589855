import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { UsageError } from "./exit.ts";

/** Where the CLI finds the API, and with which credentials. */
export interface Config {
  url: string;
  token: string;
}

type Settings = { url?: string | undefined; token?: string | undefined };

/** ~/.config/edgecron/config.json, or under $XDG_CONFIG_HOME when it is set. */
export function defaultConfigPath(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "edgecron", "config.json");
}

/**
 * The settings, each from the first place that has it: flags, then the environment
 * (EDGECRON_URL, EDGECRON_TOKEN), then the file. Pure: the file is read by `readConfigFile`.
 */
export function resolveConfig(flags: Settings, env: NodeJS.ProcessEnv, file: Settings, fileName: string): Config {
  const url = flags.url || env.EDGECRON_URL || file.url;
  const token = flags.token || env.EDGECRON_TOKEN || file.token;
  const missing = [!url && "the API's URL (--url or EDGECRON_URL)", !token && "a token (--token or EDGECRON_TOKEN)"].filter(Boolean);
  if (missing.length > 0) {
    throw new UsageError(`edgecron needs ${missing.join(" and ")}, or a config file (${fileName}) with "url" and "token"`);
  }
  if (!/^https?:\/\/[^/]/.test(url!)) throw new UsageError(`the API's URL must start with http:// or https://, not ${JSON.stringify(url)}`);
  return { url: url!, token: token! };
}

/**
 * The config file's settings. A file named with --config must exist; the default one may not.
 * It holds a token, so it is read, never written: the user makes it (mode 600 is theirs to set).
 */
export function readConfigFile(path: string, named: boolean): Settings {
  if (!existsSync(path)) {
    if (named) throw new UsageError(`no config file at ${path}`);
    return {};
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new UsageError(`${path} is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new UsageError(`${path} must hold a JSON object`);
  const { url, token } = parsed as Record<string, unknown>;
  for (const [key, value] of Object.entries({ url, token })) {
    if (value !== undefined && typeof value !== "string") throw new UsageError(`${path}: "${key}" must be a string`);
  }
  return { url: url as string | undefined, token: token as string | undefined };
}
