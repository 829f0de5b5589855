// `npm run client:schema`: writes src/client/schema.d.ts from the OpenAPI document the app
// builds from its zod schemas. The app is loaded through Vite, as the tests load it: its
// imports name no file extensions, which Node's own loader would refuse.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { runnerImport } from "vite";
import { APP_MODULE, type AppModule, renderClientSchema, SCHEMA_PATH } from "./render.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const { module } = await runnerImport<AppModule>(`${root}${APP_MODULE}`, { configFile: false, root, logLevel: "error" });
const document = module.app.getOpenAPI31Document(module.OPENAPI_HEAD as never);
writeFileSync(`${root}${SCHEMA_PATH}`, await renderClientSchema(document));
console.log(`wrote ${SCHEMA_PATH} (${Object.keys(document.paths ?? {}).length} paths)`);
