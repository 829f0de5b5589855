import Table from "cli-table3";

/** Where a command writes: results to stdout (tables, or JSON with --json), notes and progress to stderr. */
export interface Output {
  readonly json: boolean;
  /** A result: printed as JSON with --json, else rendered by `human`. */
  result(value: unknown, human: () => string): void;
  /** A line for people (stderr), so that stdout stays the result alone. */
  note(text: string): void;
  /** Whether a progress bar can be drawn (stderr is a terminal, and no --json). */
  readonly interactive: boolean;
}

export function consoleOutput(json: boolean): Output {
  return {
    json,
    result(value, human) {
      process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
    },
    note(text) {
      process.stderr.write(`${text}\n`);
    },
    interactive: !json && process.stderr.isTTY === true,
  };
}

// No colours: the tables are read in terminals, logs and CI output alike. No line between rows.
const plain = {
  style: { head: [], border: [] },
  chars: { mid: "", "left-mid": "", "mid-mid": "", "right-mid": "" },
};

/** Rows under a header. */
export function table(head: string[], rows: string[][]): string {
  const t = new Table({ head, ...plain });
  t.push(...rows);
  return t.toString();
}

/** One object's fields, one a row. */
export function details(rows: Array<[string, string]>): string {
  const t = new Table(plain);
  for (const [key, value] of rows) t.push({ [key]: value });
  return t.toString();
}

/** A value shown in a cell: objects as compact JSON, nothing as "". */
export const cell = (value: unknown): string =>
  value === undefined || value === null ? "" : typeof value === "string" ? value : JSON.stringify(value);
