/** The API fuzzer (see harness.ts), runs: POST /v1/runs/:id/complete. */
import { describe, it } from "vitest";
import { ARBITRARY_BODIES_TITLE, arbitraryBodies, type Endpoint, fuzzFile, TIMEOUT } from "./harness";

const fx = fuzzFile("runs");

describe("arbitrary JSON bodies", () => {
  const ENDPOINTS: Endpoint[] = [
    {
      label: "POST /v1/runs/:id/complete",
      method: "POST",
      path: () => `/v1/runs/${fx.fakeRun}/complete`,
      shape: { token: null, ok: null, result: null, error: null, retry: null },
      accepted: [],
      numRuns: 150,
    },
  ];

  it.each(ENDPOINTS)(ARBITRARY_BODIES_TITLE, (ep) => arbitraryBodies(fx, ep), TIMEOUT);
});
