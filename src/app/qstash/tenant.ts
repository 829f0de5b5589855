import { DEFAULT_TENANT } from "../../model/ids";
import type { Caller } from "../caller";

/** The tenant whose names (schedules, queues, URL groups) a /v2 call uses: the admin token's is the default tenant. */
export const tenantOf = (caller: Caller): string => (caller.admin ? DEFAULT_TENANT : caller.tenant.id);
