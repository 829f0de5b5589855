import type { Hook } from "@hono/zod-openapi";
import { validationResponse } from "./errors";

/** Every route's validation failure answers the same 400 (see errors.ts). */
// biome-ignore lint/suspicious/noExplicitAny: one hook serves every route, whatever its input and environment types
export const validationHook: Hook<any, any, any, any> = (result, c) => {
  if (!result.success) return validationResponse(c, result.error);
};
