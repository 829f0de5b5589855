import { Scalar } from "@scalar/hono-api-reference";
import type { Context, Next } from "hono";

/**
 * Where the reference's browser script is served from: scripts/vendor-assets.mjs copies
 * Scalar's standalone bundle there, into the static assets (wrangler.toml's [assets]).
 */
export const SCALAR_SCRIPT = "/vendor/scalar/standalone.js";

/**
 * GET /docs: the API reference, rendered in the browser by Scalar from /openapi.json. Public,
 * as the document is; the test requests it sends need a token like any other request.
 *
 * Nothing on the page reaches another host: the script is this Worker's own asset rather than
 * the CDN Scalar loads by default, and each feature below that would call one of Scalar's
 * services is off. `proxyUrl` stays unset, so test requests go straight to this origin rather
 * than through Scalar's proxy.
 */
const reference = Scalar((c) => ({
  url: "/openapi.json",
  // The document names no server (one deployment does not know its host); the page's own
  // origin is the API's, so the code samples and test requests show full URLs to it.
  servers: [{ url: new URL(c.req.url).origin }],
  cdn: SCALAR_SCRIPT,
  pageTitle: "edgecron API reference",
  authentication: { preferredSecurityScheme: "bearer" },
  // Scalar's fonts come from its font host; the browser's own do.
  withDefaultFonts: false,
  // The button opens the document in Scalar's hosted client.
  hideClientButton: true,
  // On localhost: a toolbar that uploads the document to Scalar's registry to share it.
  showDeveloperTools: "never",
  // On localhost, or with a key: "Ask AI", a chat run by Scalar's API.
  agent: { disabled: true },
  // "Generate MCP": registers the document on Scalar's dashboard.
  mcp: { disabled: true },
  telemetry: false,
}));

/**
 * The reference, its inline script marked with the nonce its Content-Security-Policy allows
 * (browser-headers.ts): the only inline script the page may run.
 */
export const docs = async (c: Context, next: Next) => {
  const rendered = await reference(c, next);
  if (!(rendered instanceof Response)) return rendered;
  const nonce = c.get("secureHeadersNonce");
  const html = (await rendered.text()).replace(/<script(?![^>]*\bsrc=)([^>]*)>/g, `<script nonce="${nonce}"$1>`);
  return c.html(html, rendered.status as 200);
};
