/**
 * Redraws the generated diagrams in docs/architecture.md from the tables in src/shard/
 * (`npm run docs:diagrams`; test/node-tools/docs.test.ts fails until the document matches).
 *
 * Plain Node runs this file, stripping its types; it does not resolve the extensionless
 * imports the Worker's sources use, so a hook adds `.ts` to relative ones before they load.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { registerHooks } from "node:module";

registerHooks({
  resolve(specifier, context, nextResolve) {
    const relativeWithoutExtension = /^\.\.?\//.test(specifier) && !/\.[cm]?[jt]s$/.test(specifier);
    return nextResolve(relativeWithoutExtension ? `${specifier}.ts` : specifier, context);
  },
});

// Imported after the hook is in place: static imports would load before it.
const { withDiagrams } = await import("../src/shard/lifecycle-diagram");

const doc = new URL("../docs/architecture.md", import.meta.url);
const before = readFileSync(doc, "utf8");
const after = withDiagrams(before);
if (after === before) console.log("docs/architecture.md: diagrams already match the tables");
else {
  writeFileSync(doc, after);
  console.log("docs/architecture.md: diagrams redrawn");
}
