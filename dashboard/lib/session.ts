import { createClient, type EdgecronClient } from "../../src/client/index.ts";

/**
 * The signed-in key lives in sessionStorage: it stays for this tab (a reload keeps it) and is
 * gone when the tab closes; it is never written anywhere that outlives the tab.
 */
const KEY = "edgecron.token";

export function savedToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function saveToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
}

/** The API is the Worker that served this page, so the client's base is this origin. */
export function clientFor(token: string): EdgecronClient {
  return createClient({ baseUrl: location.origin, token });
}
