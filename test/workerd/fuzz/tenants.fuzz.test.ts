/** The API fuzzer (see harness.ts), tenants: POST /v1/tenants and PATCH /v1/tenants/:id. */
import { describe, it } from "vitest";
import { ARBITRARY_BODIES_TITLE, arbitraryBodies, type Endpoint, fuzzFile, LIMITS_SHAPE, TIMEOUT } from "./harness";

const fx = fuzzFile("tenants");

describe("arbitrary JSON bodies", () => {
  const ENDPOINTS: Endpoint[] = [
    {
      label: "POST /v1/tenants",
      method: "POST",
      path: () => "/v1/tenants",
      shape: { name: null, limits: LIMITS_SHAPE },
      accepted: [201],
      numRuns: 150,
    },
    {
      label: "PATCH /v1/tenants/:id",
      method: "PATCH",
      path: () => `/v1/tenants/${fx.victimTenant}`,
      shape: { limits: LIMITS_SHAPE },
      accepted: [200],
      numRuns: 150,
    },
  ];

  it.each(ENDPOINTS)(ARBITRARY_BODIES_TITLE, (ep) => arbitraryBodies(fx, ep), TIMEOUT);
});
