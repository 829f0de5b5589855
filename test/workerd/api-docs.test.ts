import { SELF } from "cloudflare:test";
import type { z } from "@hono/zod-openapi";
import { describe, expect, it, vi } from "vitest";
import { app } from "../../src/api/app";
import { SCALAR_SCRIPT } from "../../src/api/docs";
import { ErrorSchema } from "../../src/model/common";

/** The API reference at /docs and what it renders: /openapi.json, with its examples and error codes. */

const ORIGIN = "https://edgecron.test";
const ERROR_REF = "#/components/schemas/Error";
const METHODS = ["get", "put", "post", "patch", "delete"];
/** The only routes a caller reaches without an API key: a long-running target holds its completion token instead. */
const TOKEN_ROUTES = ["POST /v1/runs/{id}/complete", "POST /v1/runs/{id}/heartbeat"];

interface Media {
  schema?: { $ref?: string; example?: unknown; examples?: unknown[] };
  example?: unknown;
  examples?: Record<string, { value: unknown }>;
}
interface Operation {
  summary?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ name: string; in: string; schema?: { example?: unknown } }>;
  requestBody?: { content: Record<string, Media> };
  responses: Record<string, { content?: Record<string, Media> }>;
}
interface Document {
  tags: Array<{ name: string }>;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, { example?: unknown; examples?: unknown[] }> };
}

async function openapi(): Promise<Document> {
  const res = await SELF.fetch(`${ORIGIN}/openapi.json`);
  expect(res.status).toBe(200);
  return res.json();
}

function operations(doc: Document): Array<{ name: string; path: string; method: string; op: Operation }> {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => ({ name: `${method.toUpperCase()} ${path}`, path, method, op })),
  );
}

const isError = (media: Media | undefined) => media?.schema?.$ref === ERROR_REF;
const exampleCount = (media: Media | undefined) => (media?.example !== undefined ? 1 : 0) + Object.keys(media?.examples ?? {}).length;

/** Every problem of one operation's documentation, in words; none when it is complete. */
function problemsOf(doc: Document, { method, op }: { method: string; op: Operation }): string[] {
  const problems: string[] = [];
  if (!op.summary?.trim()) problems.push("no summary");
  // The reference's sidebar is by tag: an operation without one of the document's tags lands outside every section.
  const tags = doc.tags.map((t) => t.name);
  if (!op.tags?.length || op.tags.some((t) => !tags.includes(t)))
    problems.push(`tags ${JSON.stringify(op.tags)} not among ${tags.join(", ")}`);
  const errors = Object.entries(op.responses).filter(([status]) => /^[45]\d\d$/.test(status));
  if (!errors.some(([status, r]) => status.startsWith("4") && isError(r.content?.["application/json"]))) {
    problems.push("no 4xx response with the Error schema");
  }
  for (const [status, response] of errors) {
    const media = response.content?.["application/json"];
    if (!isError(media)) problems.push(`${status} is not an Error`);
    else if (exampleCount(media) === 0) problems.push(`${status} has no example`);
  }
  const authenticated = (op.security ?? []).length > 0;
  if (authenticated && !op.responses["401"]) problems.push("authenticated, but 401 is not documented");
  if (authenticated && !op.responses["429"]) problems.push("authenticated, but 429 (the tenant's request rate) is not documented");
  const body = op.requestBody?.content["application/json"];
  if (body) {
    const ref = body.schema?.$ref?.replace("#/components/schemas/", "");
    const schema = ref ? doc.components.schemas[ref] : body.schema;
    const onSchema = schema?.example !== undefined || (schema?.examples ?? []).length > 0;
    if (!onSchema && exampleCount(body) === 0) problems.push("a JSON body without an example");
    for (const status of ["400", "413", "415"]) if (!op.responses[status]) problems.push(`a JSON body, but ${status} is not documented`);
  } else if (["put", "patch"].includes(method)) {
    problems.push(`${method.toUpperCase()} without a JSON body`);
  }
  return problems;
}

describe("GET /docs", () => {
  async function page() {
    // No Authorization: the reference is public.
    const res = await SELF.fetch(`${ORIGIN}/docs`);
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get("Content-Type")).toMatch(/^text\/html/);
    return res.text();
  }

  it("is an HTML page, public, that renders /openapi.json with the Worker's own copy of Scalar's script", async () => {
    const html = await page();
    const scripts = [...html.matchAll(/<script[^>]*\ssrc="([^"]*)"/g)].map((m) => m[1]);
    expect(scripts).toEqual([SCALAR_SCRIPT]);
    expect(SCALAR_SCRIPT).toMatch(/^\/[^/]/);
    expect(configOf(html)).toMatchObject({ url: "/openapi.json" });
  });

  it("names no other host than its own, and turns off every Scalar feature that would call one", async () => {
    const html = await page();
    const hosts = (html.match(/https?:\/\/[^\s"'`<>)/]*/gi) ?? []).filter((origin) => origin !== ORIGIN);
    expect(hosts).toEqual([]);
    expect([...html.matchAll(/\s(?:src|href)="(\/\/[^"]*)"/g)].map((m) => m[1])).toEqual([]);
    const config = configOf(html);
    expect(config).toMatchObject({
      // Code samples and test requests go to the origin the page was asked from.
      servers: [{ url: ORIGIN }],
      withDefaultFonts: false,
      hideClientButton: true,
      showDeveloperTools: "never",
      agent: { disabled: true },
      mcp: { disabled: true },
    });
    // Unset, the reference sends test requests straight to this origin; a proxy would be another host.
    expect(config).not.toHaveProperty("proxyUrl");
    expect(config).not.toHaveProperty("proxy");
    expect(config).not.toHaveProperty("pluginUrls");
  });
});

/** The configuration the page hands to Scalar.createApiReference (plain JSON: it holds no function). */
function configOf(html: string): Record<string, unknown> {
  const match = /Scalar\.createApiReference\('#app', (\{[\s\S]*?\n\s*\})\)/.exec(html);
  expect(match, "the page calls Scalar.createApiReference with a configuration").not.toBeNull();
  return JSON.parse(match![1]!);
}

describe("/openapi.json, as the reference shows it", () => {
  it("is built once per isolate: the same document every time, the generator not run again per request", async () => {
    const generate = vi.spyOn(app, "getOpenAPI31Document");
    try {
      const [first, second] = await Promise.all([1, 2].map(async () => (await SELF.fetch(`${ORIGIN}/openapi.json`)).text()));
      const third = await (await SELF.fetch(`${ORIGIN}/openapi.json`)).text();
      expect(JSON.parse(first!)).toMatchObject({ openapi: "3.1.0" });
      expect(second).toBe(first);
      expect(third).toBe(first);
      // At most the first request of the isolate builds it (none, when an earlier test already did).
      expect(generate.mock.calls.length).toBeLessThanOrEqual(1);
    } finally {
      generate.mockRestore();
    }
  });

  it("documents every operation: a summary, its error statuses with the Error schema and examples, 401 where a key is needed, an example of each JSON body", async () => {
    const doc = await openapi();
    const ops = operations(doc);
    expect(ops.length).toBeGreaterThan(25);
    const problems = ops.flatMap((o) => problemsOf(doc, o).map((p) => `${o.name}: ${p}`));
    expect(problems).toEqual([]);
  });

  it("marks every route as needing a key but the completion-token ones", async () => {
    const open = operations(await openapi())
      .filter(({ op }) => (op.security ?? []).length === 0)
      .map((o) => o.name);
    expect(open.sort()).toEqual(TOKEN_ROUTES);
  });

  it("documents what each route answers a caller without credentials: 401 where a key is needed", async () => {
    const doc = await openapi();
    const undocumented: string[] = [];
    for (const { name, path, method, op } of operations(doc)) {
      const url = path.replace(/\{(\w+)\}/g, (_, param) => String(op.parameters?.find((p) => p.name === param)?.schema?.example ?? "x"));
      const body = op.requestBody?.content["application/json"];
      const example = Object.values(body?.examples ?? {})[0]?.value;
      const res = await SELF.fetch(`${ORIGIN}${url}`, {
        method: method.toUpperCase(),
        ...(example !== undefined && { headers: { "Content-Type": "application/json" }, body: JSON.stringify(example) }),
      });
      const status = String(res.status);
      const expected = (op.security ?? []).length > 0 ? ["401"] : Object.keys(op.responses);
      if (!expected.includes(status)) undocumented.push(`${name} answered ${status}, documented: ${expected.join(", ")}`);
      if (res.status >= 400) expect(ErrorSchema.safeParse(await res.json()).success, name).toBe(true);
    }
    expect(undocumented).toEqual([]);
  });
});

describe("the examples", () => {
  const routes = app.openAPIRegistry.definitions.flatMap((d) => (d.type === "route" ? [d.route] : []));

  it("of every JSON request body pass the validation the route applies to it", () => {
    const refused: string[] = [];
    let checked = 0;
    for (const route of routes) {
      const media = route.request?.body?.content["application/json"] as {
        schema: z.ZodType;
        examples?: Record<string, { value: unknown }>;
      };
      for (const [name, { value }] of Object.entries(media?.examples ?? {})) {
        checked++;
        const result = media.schema.safeParse(value);
        if (!result.success) refused.push(`${route.method.toUpperCase()} ${route.path} ${name}: ${result.error.message}`);
      }
    }
    expect(checked).toBeGreaterThanOrEqual(8);
    expect(refused).toEqual([]);
  });

  it("of every error response are Error bodies with the code the description names", () => {
    let checked = 0;
    for (const route of routes) {
      for (const [status, config] of Object.entries(route.responses)) {
        if (Number(status) < 400) continue;
        const response = config as {
          description: string;
          content: { "application/json": { examples: Record<string, { value: unknown }> } };
        };
        for (const { value } of Object.values(response.content["application/json"].examples)) {
          checked++;
          const parsed = ErrorSchema.parse(value);
          expect(response.description, `${route.method} ${route.path} ${status}`).toContain(`\`${parsed.error.code}\``);
        }
      }
    }
    expect(checked).toBeGreaterThan(100);
  });
});
