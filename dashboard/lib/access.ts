import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Me } from "../../src/client/index.ts";

/**
 * What the signed-in key may do (GET /v1/me), so that the dashboard shows only that: a button
 * the API would refuse is not drawn. The API refuses it anyway; this only spares the reader a
 * 403. Each scope includes the ones before it (src/model/scopes.ts).
 */
export type Scope = Me["scopes"][number];
const ORDER: readonly Scope[] = ["read", "write", "admin"];

export interface Access {
  scopes: readonly Scope[];
  /** Only jobs named with this prefix; such a key sees no page about the whole tenant. */
  jobPrefix: string | null;
  /** GET /v1/me has answered: until then nothing beyond reading is shown, and nothing refused. */
  known: boolean;
}

export const READ_ONLY: Access = { scopes: ["read"], jobPrefix: null, known: false };

export function may(access: Access, scope: Scope): boolean {
  return access.scopes.some((held) => ORDER.indexOf(held) >= ORDER.indexOf(scope));
}

/** May it see pages about the whole tenant (dead letters, metrics, the audit log)? */
export const seesTenant = (access: Access) => access.jobPrefix === null;

export const AccessContext = createContext<Access>(READ_ONLY);
export const useAccess = () => useContext(AccessContext);
