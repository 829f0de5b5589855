import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Job } from "../../src/model/job";
import { api, createJob, receiverPath } from "./helpers";

/** Part of the issue "Schedules that look after themselves": every job and preview says its schedule in words. */
describe("schedule descriptions", () => {
  const target = () => ({ url: receiverPath("describe") });

  it("a job carries its description on create, get, list and patch", async () => {
    const schedule = { cron: "30 2 * * *", timezone: "Europe/Berlin", startAt: "2099-01-01T00:00:00Z", maxRuns: 5 };
    const words = "At 02:30 AM (Europe/Berlin), from 2099-01-01T00:00:00.000Z, at most 5 times";
    const created = await createJob({ schedule, target: target() });
    expect(created.description).toBe(words);

    const got = (await (await api(`/v1/jobs/${created.id}`)).json()) as Job;
    expect(got.description).toBe(words);

    const listed = (await (await api("/v1/jobs?limit=100")).json()) as { items: Job[] };
    expect(listed.items.find((j) => j.id === created.id)?.description).toBe(words);

    const res = await api(`/v1/jobs/${created.id}`, { method: "PATCH", json: { schedule: { every: "15m" } } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as Job).description).toBe("Every 15 minutes");
  });

  it("a delayed job is stored as the instant it gives, and described so", async () => {
    const job = await createJob({ schedule: { delay: "1d" }, target: target() });
    expect(job.schedule.at).toBeDefined();
    expect(job.description).toBe(`Once, at ${job.schedule.at}`);
  });

  it("a preview describes the schedule as written, a delay as a delay", async () => {
    const preview = async (schedule: Record<string, unknown>) => {
      const res = await api("/v1/schedules/preview", { method: "POST", json: { schedule, count: 1 } });
      expect(res.status).toBe(200);
      return (await res.json()) as { description: string; instants: string[] };
    };
    expect((await preview({ delay: "10m" })).description).toBe("Once, 10 minutes after creation");
    expect((await preview({ cron: "0 */15 * * * *" })).description).toBe("Every 15 minutes (UTC)");
  });

  it("the OpenAPI document declares the field on jobs and previews", async () => {
    const doc = (await (await SELF.fetch("https://edgecron.test/openapi.json")).json()) as {
      components: { schemas: Record<string, { properties: Record<string, { type?: string }>; required?: string[] }> };
    };
    for (const name of ["Job", "Preview"]) {
      const schema = doc.components.schemas[name];
      expect(schema?.properties.description?.type, name).toBe("string");
      expect(schema?.required, name).toContain("description");
    }
  });
});
