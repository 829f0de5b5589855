import type { MiddlewareHandler } from "hono";
import { NONCE, secureHeaders } from "hono/secure-headers";
import type { AppEnv } from "./context";

/**
 * The headers of the pages a browser renders from the Worker (/docs; the dashboard's assets get
 * theirs from dashboard/_headers): a Content-Security-Policy that lets a page load only this
 * origin's scripts and reach only this origin, no framing by another site (clickjacking), and
 * no Referer sent on, which would carry the page's URL elsewhere.
 *
 * /docs's one inline script (Scalar's configuration) runs by its nonce, which the docs handler
 * writes into it; Scalar sets styles at run time, hence 'unsafe-inline' for styles only.
 */
export const docsHeaders: MiddlewareHandler<AppEnv> = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'self'"],
    scriptSrc: ["'self'", NONCE],
    styleSrc: ["'self'", "'unsafe-inline'"],
    imgSrc: ["'self'", "data:"],
    fontSrc: ["'self'", "data:"],
    connectSrc: ["'self'"],
    objectSrc: ["'none'"],
    baseUri: ["'none'"],
    formAction: ["'self'"],
    frameAncestors: ["'none'"],
  },
  xFrameOptions: "DENY",
  referrerPolicy: "no-referrer",
  crossOriginOpenerPolicy: "same-origin",
});

/**
 * On every answer, the API's included: a browser that loads one (a link to an error, a key's
 * JSON) renders it as the type it is sent as, never sniffed into HTML that could run a script.
 */
export const noSniff: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  c.header("X-Content-Type-Options", "nosniff");
};
