import { failpoint } from "../faults";

/** D1 could not answer. The API turns it into 503 + Retry-After; shards never depend on D1. */
export class CatalogUnavailable extends Error {}

export async function guard<T>(operation: string, call: () => Promise<T>): Promise<T> {
  try {
    failpoint("catalog.unavailable");
    return await call();
  } catch (err) {
    throw new CatalogUnavailable(`catalog ${operation} failed: ${(err as Error).message}`, { cause: err });
  }
}
