import { Hono } from "hono";
import { rotateSigning, signingKeys } from "../../app/signing";
import type { AppEnv } from "../context";

/** /v2/keys: the tenant's signing keys as QStash names them; the JWT of each delivery is signed with `current`. */
export const keys = new Hono<AppEnv>();

keys.get("/keys", async (c) => {
  const { current, next } = await signingKeys(c.env, c.var.caller, undefined);
  return c.json({ current, next }, 200);
});

keys.post("/keys/rotate", async (c) => {
  const { current, next } = await rotateSigning(c.env, c.var.caller, undefined);
  return c.json({ current, next }, 200);
});
