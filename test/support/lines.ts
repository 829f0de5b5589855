import type { ChildProcess } from "node:child_process";
import { eachLine as eachStreamLine } from "../../scripts/dev-output.ts";

/**
 * Calls `take` with each line a child process writes to stdout or stderr, as it comes (the
 * splitter `npm start` uses on wrangler's output). A last line without a newline is given too
 * when the stream ends: a dying process's last words often come so.
 */
export function eachLine(child: ChildProcess, take: (line: string, stream: "stdout" | "stderr") => void): void {
  if (child.stdout) eachStreamLine(child.stdout, (line) => take(line, "stdout"));
  if (child.stderr) eachStreamLine(child.stderr, (line) => take(line, "stderr"));
}
