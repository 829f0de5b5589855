import { EdgecronError } from "edgecron/client";

/** The CLI's exit codes, as docs/operations.md ("The CLI") documents them. */
export const EXIT = {
  ok: 0,
  /** The API refused or failed the call, or it could not be reached, or anything unexpected. */
  error: 1,
  /** The command line, the configuration or an input file is wrong: nothing was sent. */
  usage: 2,
  /** The API answered 404: no such job or run (or not the caller's). */
  notFound: 3,
} as const;

/** A mistake of the caller's, found before any call: exits 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** The exit code and the message for what a command threw. */
export function failureOf(err: unknown): { code: number; message: string } {
  if (err instanceof UsageError) return { code: EXIT.usage, message: err.message };
  if (err instanceof EdgecronError) {
    const issues = err.issues?.map((i) => `\n  ${i.path}: ${i.message}`).join("") ?? "";
    const what = err.status === 0 ? err.code : `${err.status} ${err.code}`;
    // The message already lists the issues one after another; one a line reads better.
    const message = issues === "" ? err.message : "the request was refused:";
    return { code: err.status === 404 ? EXIT.notFound : EXIT.error, message: `${what}: ${message}${issues}` };
  }
  // The stack is for whoever debugs the CLI itself, not for its users.
  const debug = process.env.EDGECRON_DEBUG === "1" && err instanceof Error;
  return { code: EXIT.error, message: err instanceof Error ? (debug && err.stack) || err.message : String(err) };
}
