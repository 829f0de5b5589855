import type { OpenAPIHono } from "@hono/zod-openapi";
import { ROUTE_SCOPES, type RouteAccess } from "./route-scopes";

/**
 * Writes each route's scope (route-scopes.ts, the one table) into the OpenAPI document: as the
 * scope its bearer requirement names, and in words at the end of its description, so that the
 * reference (/docs) and the generated client say what a key needs. Run once every route is
 * registered; a route the table does not name is left as it is (and refused at run time).
 */
export function documentScopes(app: OpenAPIHono<never>): void {
  for (const definition of app.openAPIRegistry.definitions) {
    if (definition.type !== "route") continue;
    const { route } = definition;
    const access = ROUTE_SCOPES[`${route.method.toUpperCase()} ${route.path.replace(/\{(\w+)\}/g, ":$1")}`];
    if (!access) continue;
    const words = scopeWords(access);
    route.description = route.description ? `${route.description}\n\n${words}` : words;
    if (access !== "completion-token") route.security = [{ bearer: [access.scope] }];
  }
}

function scopeWords(access: RouteAccess): string {
  if (access === "completion-token") return "Authenticated by the attempt's completion token, not an API key.";
  const prefix = access.perJob ? "" : " Refused to a key limited to a prefix of job names: it concerns the whole tenant.";
  return `Needs a key with the \`${access.scope}\` scope (or a broader one).${prefix}`;
}
