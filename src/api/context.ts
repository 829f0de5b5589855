import type { Context } from "hono";
import type { Caller } from "../app/caller";

/** Handlers never read the Authorization header themselves: `authenticate` sets the caller. */
export type AppEnv = { Bindings: Env; Variables: { caller: Caller } };
export type AppContext = Context<AppEnv>;
