import type { ChildProcess } from "node:child_process";

/**
 * Calls `take` with each line a child process writes to stdout or stderr, as it comes. A last
 * line without a newline is given too when the stream ends: a dying process's last words often
 * come so.
 */
export function eachLine(child: ChildProcess, take: (line: string, stream: "stdout" | "stderr") => void): void {
  for (const [name, stream] of [
    ["stdout", child.stdout],
    ["stderr", child.stderr],
  ] as const) {
    if (!stream) continue;
    let partial = "";
    stream.on("data", (chunk: Buffer) => {
      const lines = (partial + chunk.toString("utf8")).split(/\r?\n/);
      partial = lines.pop()!;
      for (const line of lines) take(line, name);
    });
    stream.on("end", () => {
      if (partial !== "") take(partial, name);
    });
  }
}
