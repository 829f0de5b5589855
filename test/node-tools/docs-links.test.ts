import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { APP_MODULE } from "../../tools/client-schema/render.ts";

/**
 * The READMEs (the repository's, test/'s) and the pages of docs/ stay true to the repository and to the app: every relative
 * link names a file that exists (and a `#heading` that exists in it), and every route they name
 * as `METHOD /path` is a route of the app, read from its route table (the routes /openapi.json
 * documents, and the few it does not: /healthz, /docs, /openapi.json).
 */
const root = fileURLToPath(new URL("../../", import.meta.url));
const DOCS = ["README.md", "test/README.md", ...readdirSync(join(root, "docs")).flatMap((f) => (f.endsWith(".md") ? [`docs/${f}`] : []))];

/** The text outside fenced code blocks: a link or a route in an example is not checked. */
function prose(markdown: string): string {
  let fenced = false;
  return markdown
    .split("\n")
    .map((line) => {
      if (/^\s*(```|~~~)/.test(line)) {
        fenced = !fenced;
        return "";
      }
      return fenced ? "" : line;
    })
    .join("\n");
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a markdown file's headings give, duplicates numbered as GitHub numbers them. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of prose(markdown).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative links of a markdown file, as [text](target) and ![alt](target). */
function relativeLinks(markdown: string): string[] {
  return [...prose(markdown).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)]
    .map((m) => m[1]!)
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

/** What is wrong with the links of `file` (a path from the root), given a way to read other files. */
function brokenLinks(file: string, markdown: string, read: (path: string) => string | null): string[] {
  const problems: string[] = [];
  for (const target of relativeLinks(markdown)) {
    const [path = "", anchor] = target.split("#", 2) as [string, string | undefined];
    const resolved = path === "" ? file : relative(root, join(root, dirname(file), decodeURIComponent(path)));
    const text = path === "" ? markdown : read(resolved);
    if (text === null) {
      problems.push(`${file}: the link (${target}) names ${resolved}, which does not exist`);
      continue;
    }
    if (anchor !== undefined && resolved.endsWith(".md") && !anchors(text).has(anchor.toLowerCase())) {
      problems.push(`${file}: the link (${target}) names #${anchor}, which is no heading of ${resolved}`);
    }
  }
  return problems;
}

/** The routes a markdown file names in inline code, as `METHOD /path`, parameters written :name or <name>. */
function documentedRoutes(markdown: string): string[] {
  return [...prose(markdown).matchAll(/`(GET|POST|PUT|PATCH|DELETE|HEAD)\s+(\/[^\s`?#]*)/g)].map((m) => `${m[1]} ${normalRoute(m[2]!)}`);
}

/** A route with every parameter as `:_`, and no trailing slash, so that `:id`, `:keyId`, `<id>` and `{id}` compare equal. */
function normalRoute(path: string): string {
  const normal = path.replace(/:[A-Za-z_]\w*|<[^>/]+>|\{[^}/]+\}/g, ":_").replace(/(?<=.)\/$/, "");
  return normal;
}

const readRepo = (path: string): string | null => {
  const full = join(root, path);
  if (!existsSync(full)) return null;
  try {
    return readFileSync(full, "utf8");
  } catch {
    return ""; // a directory, or a file that is not text: it exists, and has no headings
  }
};

interface AppModule {
  app: { routes: Array<{ method: string; path: string }> };
}

/** The app's routes, as a test of a documented one: equal to one, or under one that ends in `*` (a path of any depth: the /v2 destinations). */
async function appRoutes(): Promise<{ size: number; has: (route: string) => boolean }> {
  const { app } = (await import(/* @vite-ignore */ new URL(APP_MODULE, new URL("../../", import.meta.url)).href)) as AppModule;
  const exact = new Set(app.routes.filter((r) => r.method !== "ALL").map((r) => `${r.method} ${normalRoute(r.path)}`));
  const wild = [...exact]
    .filter((route) => route.endsWith("/*"))
    .map(
      (route) =>
        new RegExp(
          `^${route
            .slice(0, -1)
            .replace(/[.+?^${}()|[\]\\]/g, "\\$&")
            .replace(/:_/g, "[^/]+")}.+$`,
        ),
    );
  return { size: exact.size, has: (route) => exact.has(route) || wild.some((w) => w.test(route)) };
}

describe("the README and docs/*.md", () => {
  it.each(DOCS)("%s: every relative link names a file, and a heading, that exist", (file) => {
    expect(brokenLinks(file, readFileSync(join(root, file), "utf8"), readRepo)).toEqual([]);
  });

  it("name only routes the app has", async () => {
    const routes = await appRoutes();
    expect(routes.size, "the app's route table").toBeGreaterThan(20);
    const unknown = DOCS.flatMap((file) =>
      documentedRoutes(readFileSync(join(root, file), "utf8"))
        .filter((route) => !routes.has(route))
        .map((route) => `${file}: \`${route}\` is no route of the app (src/api/)`),
    );
    expect(unknown).toEqual([]);
  });

  it("have links and routes for the checks above to read", () => {
    const text = DOCS.map((file) => readFileSync(join(root, file), "utf8"));
    expect(relativeLinks(text[0]!).length, "the README's links to the docs").toBeGreaterThan(10);
    const named = new Set(text.flatMap(documentedRoutes));
    expect(named.has("GET /v1/jobs/:_")).toBe(true);
    expect(named.size).toBeGreaterThan(20);
  });
});

describe("the checks themselves", () => {
  const files: Record<string, string> = {
    "docs/a.md": "# A page\n\n## The sweep's timing\n\n## Changing a job: ETags and `If-Match`\n\n## Twice\n\n## Twice\n",
    "docs/b.md":
      "see [a](a.md), [timing](a.md#the-sweeps-timing), [etags](a.md#changing-a-job-etags-and-if-match), [2nd](a.md#twice-1), [up](../README.md)",
    "README.md": "# x",
  };
  const read = (path: string) => files[path] ?? null;

  it("find a link to a file that does not exist, and to a heading that does not", () => {
    expect(brokenLinks("docs/b.md", files["docs/b.md"]!, read)).toEqual([]);
    expect(brokenLinks("docs/c.md", "[x](missing.md) [y](a.md#no-such-heading) [z](#own)\n\n```\n[in code](gone.md)\n```", read)).toEqual([
      "docs/c.md: the link (missing.md) names docs/missing.md, which does not exist",
      "docs/c.md: the link (a.md#no-such-heading) names #no-such-heading, which is no heading of docs/a.md",
      "docs/c.md: the link (#own) names #own, which is no heading of docs/c.md",
    ]);
    const own = `${files["docs/a.md"]}\n[own](#twice) [web](https://example.com/x.md) [mail](mailto:a@b.c)`;
    expect(brokenLinks("docs/a.md", own, read)).toEqual([]);
  });

  it("read routes in inline code, whatever their parameters are called", () => {
    expect(
      documentedRoutes("`GET /v1/jobs/:id`, `DELETE /v1/tenants/:id/keys/:old`, `POST /v1/jobs/<id>/pause`, `GET /v1/jobs?limit=`"),
    ).toEqual(["GET /v1/jobs/:_", "DELETE /v1/tenants/:_/keys/:_", "POST /v1/jobs/:_/pause", "GET /v1/jobs"]);
    expect(documentedRoutes("```sh\ncurl -X `POST /v1/nowhere`\n```")).toEqual([]);
  });
});
