import type { Command } from "commander";
import { createClient, type EdgecronClient } from "edgecron/client";
import { defaultConfigPath, readConfigFile, resolveConfig } from "./config.ts";
import { consoleOutput, type Output } from "./output.ts";
import { retryingFetch } from "./retrying-fetch.ts";

/** The program-wide options every command sees. */
export interface GlobalOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

/** What a command's action works with: the API through the typed client, and where to write. */
export interface Context {
  client: EdgecronClient;
  out: Output;
}

/** The context of a command being run, from its options and the program's (flags, then env, then file). */
export function contextOf(command: Command): Context {
  const options = command.optsWithGlobals<GlobalOptions>();
  const path = options.config ?? defaultConfigPath(process.env);
  const config = resolveConfig(options, process.env, readConfigFile(path, options.config !== undefined), path);
  return {
    client: createClient({ baseUrl: config.url, token: config.token, fetch: retryingFetch() }),
    out: consoleOutput(options.json === true),
  };
}
