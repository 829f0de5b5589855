/** One field the API refused, and why. */
export interface ApiIssue {
  path: string;
  message: string;
}

/**
 * What every failed call throws: an answer of 4xx/5xx (`status`, and the API's `code` from its
 * `{ error: { code, message, issues? } }` body), or no answer at all (`status` 0, code
 * `unreachable`).
 */
export class EdgecronError extends Error {
  readonly status: number;
  readonly code: string;
  readonly issues: ApiIssue[] | undefined;

  constructor(status: number, code: string, message: string, issues?: ApiIssue[]) {
    super(message);
    this.name = "EdgecronError";
    this.status = status;
    this.code = code;
    this.issues = issues;
  }
}

/**
 * The error for a failed answer. `body` is the parsed JSON, or the text when it was not JSON:
 * a proxy or a platform error page may stand in front of the API and answer in its own words.
 */
export function errorOfAnswer(status: number, body: unknown): EdgecronError {
  const error = typeof body === "object" && body !== null ? (body as { error?: unknown }).error : undefined;
  if (typeof error === "object" && error !== null) {
    const { code, message, issues } = error as { code?: unknown; message?: unknown; issues?: unknown };
    if (typeof code === "string" && typeof message === "string") {
      return new EdgecronError(status, code, message, Array.isArray(issues) ? (issues as ApiIssue[]) : undefined);
    }
  }
  const text = typeof body === "string" ? body.trim().slice(0, 200) : "";
  return new EdgecronError(status, `http_${status}`, text === "" ? `HTTP ${status}` : `HTTP ${status}: ${text}`);
}
