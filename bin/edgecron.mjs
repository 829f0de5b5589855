#!/usr/bin/env node
// The CLI is TypeScript (cli/), which Node runs by stripping the types: on by default from Node
// 22.18. `npm install` brings such a Node (the devDependency "node") and npx and npm scripts put
// it first on the PATH; a bare older `node` gets told so rather than a syntax error.
if (!process.features.typescript) {
  process.stderr.write(`edgecron needs Node 22.18 or newer (this is ${process.version}): run it with npx edgecron in the repository\n`);
  process.exit(1);
}
const { run } = await import("../cli/main.ts");
process.exitCode = await run(process.argv);
