import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { APP_MODULE, type AppModule, renderClientSchema, SCHEMA_PATH } from "../../tools/client-schema/render.ts";

/**
 * The typed client (src/client/) compiles against src/client/schema.d.ts, generated from the
 * OpenAPI document the app builds from its zod schemas. This renders it again from the live
 * document, in memory, and compares: a schema or route changed without `npm run client:schema`
 * fails here, before the client and the API disagree.
 */
const root = new URL("../../", import.meta.url);
const REGENERATE = "run `npm run client:schema` and commit src/client/schema.d.ts";

async function liveDocument() {
  const { app, OPENAPI_HEAD } = (await import(/* @vite-ignore */ new URL(APP_MODULE, root).href)) as AppModule;
  return app.getOpenAPI31Document(OPENAPI_HEAD as never);
}

describe("the typed client's generated types", () => {
  it(`${SCHEMA_PATH} is what \`npm run client:schema\` generates from the app's OpenAPI document`, async () => {
    const fresh = await renderClientSchema(await liveDocument());
    const committed = readFileSync(new URL(SCHEMA_PATH, root), "utf8");
    expect(committed === fresh, `${SCHEMA_PATH} is stale: ${REGENERATE}`).toBe(true);
  });

  it("differ when the document does: a route added to it changes the rendering", async () => {
    const document = await liveDocument();
    const grown = { ...document, paths: { ...document.paths, "/v1/drift-probe": { get: { responses: { 204: { description: "x" } } } } } };
    const [before, after] = await Promise.all([renderClientSchema(document), renderClientSchema(grown)]);
    expect(after).not.toBe(before);
    expect(after).toContain('"/v1/drift-probe"');
  });
});
