import { z } from "@hono/zod-openapi";
import { ErrorSchema } from "../model/common";

/** Pieces every route declaration repeats. */

export const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { "application/json": { schema } }, description });

export const errors = (...codes: Array<400 | 401 | 403 | 404 | 409 | 503>) =>
  Object.fromEntries(codes.map((code) => [code, json(ErrorSchema, "error")]));

export const bearer = [{ bearer: [] }];

export const pathId = (example: string) =>
  z.object({
    id: z
      .string()
      .max(200)
      .openapi({ param: { name: "id", in: "path" }, example }),
  });

export const tenantParam = z.object({
  id: z
    .string()
    .max(100)
    .openapi({ param: { name: "id", in: "path" }, example: "ten_0123456789abcdefghij" }),
});
