import type { Hook } from "@hono/zod-openapi";
import { validationResponse } from "./errors";

/** Every route's validation failure answers the same 400 (see errors.ts). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const validationHook: Hook<any, any, any, any> = (result, c) => {
  if (!result.success) return validationResponse(c, result.error);
};
