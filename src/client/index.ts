import createFetchClient from "openapi-fetch";
import { EdgecronError, errorOfAnswer } from "./errors.ts";
import { everyItem } from "./pages.ts";
import type { components, paths } from "./schema";

/**
 * The typed client of the edgecron API: `import { createClient } from "edgecron/client"`.
 * Its types are generated from the OpenAPI document the Worker serves (./schema.d.ts), so a
 * call the API would refuse for its shape does not compile. Web-platform APIs only (fetch,
 * Request, Response): it runs in Node, in a Worker and in a browser.
 */

export type { ApiIssue } from "./errors.ts";
export type { Page } from "./pages.ts";
export type { components, paths };
export { EdgecronError, everyItem };

type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type CreateJob = Schemas["CreateJob"];
export type PatchJob = Schemas["PatchJob"];
export type Run = Schemas["Run"];
export type Schedule = Schemas["Schedule"];
export type PreviewRequest = Schemas["PreviewRequest"];
export type Preview = Schemas["Preview"];
export type Backfill = Schemas["Backfill"];
export type BatchCreateResult = Schemas["BatchCreateResult"];
export type BatchCreateItem = Schemas["BatchCreateItem"];
export type AuditEntry = Schemas["AuditEntry"];
export type Me = Schemas["Me"];

/** GET /v1/audit's filters; instants as ISO-8601. */
export interface AuditQuery extends PageQuery {
  action?: string;
  actor?: string;
  subject?: string;
  since?: string;
  until?: string;
  tenantId?: string;
}

export interface ClientOptions {
  /** Where the API is, e.g. http://127.0.0.1:8787 (a path after the host is kept). */
  baseUrl: string;
  /** A tenant API key or the admin token, sent as `Authorization: Bearer <token>`. */
  token: string;
  /** Another fetch, e.g. one that logs or retries; globalThis.fetch by default. */
  fetch?: (request: Request) => Promise<Response>;
}

export interface PageQuery {
  limit?: number;
  cursor?: string;
}

/** What openapi-fetch answers: the success body, or the error body, and the response. */
interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The body of a 2xx answer; any other answer, or none, throws an EdgecronError. */
async function body<D>(call: Promise<Answer<D>>): Promise<D> {
  let answer: Answer<D>;
  try {
    answer = await call;
  } catch (err) {
    throw new EdgecronError(0, "unreachable", `no answer from the API: ${messageOf(err)}`);
  }
  if (!answer.response.ok) throw errorOfAnswer(answer.response.status, answer.error);
  return answer.data as D;
}

/** fetch's own message ("fetch failed") hides the reason in its cause (ECONNREFUSED, …). */
function messageOf(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return `${err.message}${cause}`;
}

export function createClient(options: ClientOptions) {
  const api = createFetchClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    headers: { Authorization: `Bearer ${options.token}` },
    ...(options.fetch && { fetch: options.fetch }),
  });
  const id = (value: string) => ({ params: { path: { id: value } } });

  const jobs = {
    list: (query: PageQuery = {}) => body(api.GET("/v1/jobs", { params: { query } })),
    /** Every job, newest first, following the cursors. */
    all: (pageSize = 200) => everyItem<Job>((cursor) => jobs.list({ limit: pageSize, cursor })),
    get: (jobId: string) => body(api.GET("/v1/jobs/{id}", id(jobId))),
    create: (job: CreateJob) => body(api.POST("/v1/jobs", { body: job })),
    /**
     * Up to 1,000 jobs in one request, each answered on its own (`results`, in order): the job
     * (status 201) or its error; only a refusal of the whole request throws.
     */
    createMany: (list: CreateJob[]) => body(api.POST("/v1/jobs/batch", { body: { jobs: list } })),
    /** `ifMatch`: the job's ETag as last read (`"v3"`): the change is made only if the job is still so (412 else). */
    patch: (jobId: string, patch: PatchJob, ifMatch?: string) =>
      body(
        api.PATCH("/v1/jobs/{id}", {
          params: { path: { id: jobId }, header: ifMatch === undefined ? undefined : { "if-match": ifMatch } },
          body: patch,
        }),
      ),
    pause: (jobId: string) => body(api.POST("/v1/jobs/{id}/pause", id(jobId))),
    resume: (jobId: string) => body(api.POST("/v1/jobs/{id}/resume", id(jobId))),
    delete: (jobId: string) => body(api.DELETE("/v1/jobs/{id}", id(jobId))),
    /** One run now; the same idempotency key always yields the same run. */
    trigger: (jobId: string, idempotencyKey?: string) =>
      body(
        api.POST("/v1/jobs/{id}/trigger", {
          params: { path: { id: jobId }, header: idempotencyKey === undefined ? undefined : { "idempotency-key": idempotencyKey } },
        }),
      ),
    /** Runs for every fire in [from, to]; the API takes at most 1,000 fires per call. */
    backfill: (jobId: string, range: Backfill) => body(api.POST("/v1/jobs/{id}/backfill", { ...id(jobId), body: range })),
    runs: (jobId: string, query: PageQuery = {}) => body(api.GET("/v1/jobs/{id}/runs", { params: { path: { id: jobId }, query } })),
  };

  const runs = {
    get: (runId: string) => body(api.GET("/v1/runs/{id}", id(runId))),
    retry: (runId: string) => body(api.POST("/v1/runs/{id}/retry", id(runId))),
    deadLetters: (query: PageQuery & { jobId?: string } = {}) => body(api.GET("/v1/dead-letters", { params: { query } })),
  };

  const schedules = {
    preview: (request: PreviewRequest) => body(api.POST("/v1/schedules/preview", { body: request })),
  };

  const audit = {
    /** A page of the audit log, newest first. */
    list: (query: AuditQuery = {}) => body(api.GET("/v1/audit", { params: { query } })),
  };

  /** What this credential may do: its tenant, scopes and job prefix. */
  const me = () => body(api.GET("/v1/me"));

  return {
    jobs,
    runs,
    schedules,
    audit,
    me,
    /** The typed openapi-fetch client itself, for any route: answers are not unwrapped, errors not thrown. */
    api,
  };
}

export type EdgecronClient = ReturnType<typeof createClient>;
