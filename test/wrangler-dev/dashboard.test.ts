import { mkdirSync } from "node:fs";
import type { Server } from "node:http";
import axe from "axe-core";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium } from "../support/browser";
import { type Stack, startStack } from "../support/local-stack";
import { startReceiver } from "../support/receiver";

/**
 * The dashboard in a real browser (a system Chromium, else the one @sparticuz/chromium carries:
 * test/support/browser.ts; driven by playwright-core) against the
 * real local stack started as `npm start` starts it, with a loopback receiver as the targets:
 * sign in, create a job and watch its run succeed, pause it, retry a dead letter. Every page
 * is checked by axe-core (WCAG 2.1 A and AA rules) and photographed into test-output/dashboard.
 */

const SHOTS = new URL("../../test-output/dashboard/", import.meta.url).pathname;

let stack: Stack | undefined;
let receiver: { url: string; server: Server } | undefined;
let browser: Browser | undefined;
let tenantKey = "";
let tenantId = "";

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  receiver = await startReceiver();
  stack = await startStack({ snapshot: true, label: "dashboard" });
  const tenant = await stack.api("POST", "/v1/tenants", { name: "dashboard" });
  expect(tenant.status, JSON.stringify(tenant.json)).toBe(201);
  tenantKey = tenant.json.apiKey;
  tenantId = tenant.json.id;
  const launched = await launchChromium();
  browser = launched.browser;
  console.log(`dashboard tests: Chromium ${launched.which}`);
});

afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  if (receiver) await new Promise<void>((resolve) => receiver!.server.close(() => resolve()));
});

/** axe-core's findings on the page as it is now: "rule: what, where" lines, none expected. */
async function accessibilityViolations(page: Page): Promise<string[]> {
  // Evaluated through the browser's protocol, not added as a <script>: the pages' policy
  // (dashboard/_headers) refuses inline scripts, as it must refuse an injected one.
  await page.evaluate(axe.source);
  // A string, evaluated in the page: axe and document exist there, not in this Node file's types.
  const rules = JSON.stringify({ runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] } });
  const results = (await page.evaluate(`axe.run(document, ${rules})`)) as axe.AxeResults;
  // A run that checked nothing would pass too: it must at least have passed some rules.
  expect(results.passes.length).toBeGreaterThan(0);
  return results.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`);
}

/** Checks the page with axe and keeps a screenshot of it. */
async function checkPage(page: Page, name: string) {
  await page.screenshot({ path: `${SHOTS}${name}.png`, fullPage: true });
  expect(await accessibilityViolations(page), `accessibility of ${name}`).toEqual([]);
}

async function signedIn(viewport = { width: 1280, height: 900 }): Promise<Page> {
  const page = await browser!.newPage({ viewport });
  await page.goto(stack!.base);
  await page.getByLabel("API key or admin token").fill(tenantKey);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Jobs" }).waitFor();
  return page;
}

describe("dashboard", () => {
  it("refuses a wrong key and says why, then signs in with a tenant's key", async () => {
    const page = await browser!.newPage();
    await page.goto(stack!.base);
    await checkPage(page, "sign-in");
    await page.getByLabel("API key or admin token").fill("not-a-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toMatch(/token|key|auth/i);
    await page.getByLabel("API key or admin token").fill(tenantKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Jobs" }).waitFor();
    // The key is kept for the tab: a reload stays signed in.
    await page.reload();
    await page.getByRole("heading", { name: "Jobs" }).waitFor();
    await page.close();
  });

  it("creates a job, shows its run succeed on the timeline with its attempts, and pauses it", async () => {
    const page = await signedIn();
    await page.getByRole("link", { name: "New job" }).click();
    await page.getByLabel("Name").fill("browser-every-2s");
    await page.getByLabel("Cron expression").fill("*/2 * * * * *");
    await page.getByLabel("Time zone").fill("Europe/Berlin");
    await page.getByRole("button", { name: "Preview schedule" }).click();
    await page.getByRole("table", { name: /Next runs in Europe\/Berlin/ }).waitFor();
    await page.getByLabel("URL").fill(`${receiver!.url}/hit/browser-ok`);
    await checkPage(page, "new-job");
    await page.getByRole("button", { name: "Create job" }).click();

    await page.getByRole("heading", { name: "browser-every-2s" }).waitFor();
    await page.locator(".runs .state-succeeded").first().waitFor({ timeout: 60_000 });
    await page.locator(".timeline .mark.state-succeeded").first().waitFor();
    await page.locator(".runs button.link").last().click();
    await expect.poll(() => page.locator(".run-details").first().textContent()).toMatch(/succeeded[\s\S]*200/);
    await checkPage(page, "job");

    await page.getByRole("button", { name: "Pause" }).click();
    await page.getByRole("status").filter({ hasText: "Paused." }).waitFor();
    await page.locator(".title-row .job-paused").waitFor();
    await page.getByRole("button", { name: "Resume" }).waitFor();
    // The API agrees: the job is paused.
    const jobs = await stack!.api("GET", "/v1/jobs", undefined, { token: tenantKey });
    expect(jobs.json.items.find((j: { name: string }) => j.name === "browser-every-2s")?.paused).toBe(true);

    await page.getByRole("link", { name: "Jobs" }).first().click();
    await page.getByRole("searchbox").fill("browser-every");
    await expect.poll(() => page.locator("tbody tr").count()).toBe(1);
    await checkPage(page, "jobs");
    await page.close();
  });

  it("retries a dead letter", async () => {
    const created = await stack!.api(
      "POST",
      "/v1/jobs",
      {
        name: "browser-dies",
        schedule: { delay: "1s" },
        target: { url: `${receiver!.url}/hit/browser-dead?status=500` },
        retry: { maxAttempts: 1 },
      },
      { token: tenantKey },
    );
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const page = await signedIn();
    await page.getByRole("link", { name: "Dead letters" }).click();
    await page.getByRole("button", { name: "Retry" }).first().waitFor({ timeout: 60_000 });
    await checkPage(page, "dead-letters");
    expect(await hitsOf("browser-dead")).toBe(1);
    await page.getByRole("button", { name: "Retry" }).first().click();
    await page.getByRole("status").filter({ hasText: "goes again" }).waitFor();
    // The retried run is attempted again: the receiver sees a second request.
    await expect.poll(() => hitsOf("browser-dead"), { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    await page.close();
  });

  it("previews a schedule with the clock change marked, readable on a phone", async () => {
    const page = await signedIn({ width: 390, height: 844 });
    await page.getByRole("link", { name: "Schedule preview" }).click();
    await page.getByLabel("Cron expression").fill("30 2 * * *");
    await page.getByLabel("Time zone").fill("Europe/Berlin");
    await page.getByLabel("From (optional)").fill("2027-03-25T00:00");
    await page.getByRole("button", { name: "Preview" }).click();
    await expect.poll(() => page.locator(".dst-note").first().textContent()).toMatch(/clocks go forward: UTC\+1 → UTC\+2/);
    // Nothing wider than the phone's screen but the tables' own scrolling.
    expect(await page.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
    await checkPage(page, "preview-phone");
    await page.close();
  });
});

describe("workflow jobs", () => {
  it("shows the graph, a run's steps on it with their states, and links the job it triggers on success", async () => {
    const hit = (name: string) => ({ url: `${receiver!.url}/hit/${name}` });
    const report = await stack!.api(
      "POST",
      "/v1/jobs",
      { name: "browser-report", schedule: { cron: "0 0 1 1 *" }, target: hit("wf-report") },
      { token: tenantKey },
    );
    expect(report.status, JSON.stringify(report.json)).toBe(201);
    const created = await stack!.api(
      "POST",
      "/v1/jobs",
      {
        name: "browser-workflow",
        schedule: { delay: "1s" },
        steps: [
          { id: "extract", target: hit("wf-extract") },
          { id: "transform", target: hit("wf-transform"), after: ["extract"] },
          { id: "alert", target: hit("wf-alert"), after: ["transform"], when: "any_failed" },
        ],
        onSuccess: [report.json.id],
      },
      { token: tenantKey },
    );
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const page = await signedIn();
    await page.goto(`${stack!.base}/#/jobs/${created.json.id}`);
    await page.getByRole("heading", { name: "Workflow", exact: true }).waitFor();
    await expect
      .poll(() => page.locator(".graph > li").allTextContents())
      .toEqual(["extract", "transformafter extract", "alertafter transform, when any failed"]);
    await page.locator(".runs .state-succeeded").first().waitFor({ timeout: 60_000 });
    await page.locator(".runs button.link").first().click();
    await expect.poll(() => page.locator(".run-details .graph .badge").allTextContents()).toEqual(["succeeded", "succeeded", "skipped"]);
    // The job it triggers on success: a link to its page, where the chained run shows.
    await page.getByRole("link", { name: report.json.id }).click();
    await page.getByRole("heading", { name: "browser-report" }).waitFor();
    await page.locator(".runs .state-succeeded").first().waitFor({ timeout: 60_000 });
    expect(await page.locator(".runs td", { hasText: "chain" }).count()).toBeGreaterThan(0);
    // Its details name the run that triggered it, on a link back to the workflow's page.
    await page.locator(".runs button.link").first().click();
    await page.getByText("Triggered when run").waitFor();
    expect(await page.locator(".run-details a").getAttribute("href")).toBe(`#/jobs/${created.json.id}`);
    await page.goBack();
    await page.getByRole("heading", { name: "Workflow", exact: true }).waitFor();
    await checkPage(page, "workflow");
    await page.close();
  });
});

describe("least privilege in the browser", () => {
  it("sends its security headers and runs under them: no Content-Security-Policy violation on any page", async () => {
    const page = await browser!.newPage();
    const violations: string[] = [];
    page.on("console", (m) => {
      if (/Content Security Policy|Refused to (load|execute|apply|connect|frame)/i.test(m.text())) violations.push(m.text());
    });
    for (const path of ["/", "/docs"]) {
      const res = await page.goto(`${stack!.base}${path}`);
      const headers = res!.headers();
      expect(headers["content-security-policy"], path).toMatch(/default-src 'self'.*frame-ancestors 'none'/);
      expect(headers["x-frame-options"], path).toBe("DENY");
      expect(headers["referrer-policy"], path).toBe("no-referrer");
    }
    await page.getByRole("heading", { name: "Jobs", exact: true }).waitFor();
    await page.goto(stack!.base);
    await page.getByLabel("API key or admin token").fill(tenantKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Jobs" }).waitFor();
    await page.getByRole("link", { name: "Audit log" }).click();
    await page.getByRole("heading", { name: "Audit log" }).waitFor();
    await checkPage(page, "audit");
    expect(violations).toEqual([]);
    // An injected inline script does not run, and the browser says why: the policy is in force.
    await page.evaluate(
      `(() => { const s = document.createElement("script"); s.textContent = "window.injected = true"; document.body.append(s); })()`,
    );
    expect(await page.evaluate("window.injected === true")).toBe(false);
    await expect.poll(() => violations.length).toBeGreaterThan(0);
    await page.close();
  });

  it("a read-only key sees no button it may not use, and no audit log", async () => {
    const key = await stack!.api("POST", `/v1/tenants/${tenantId}/keys`, { scopes: ["read"] });
    expect(key.status, JSON.stringify(key.json)).toBe(201);
    const page = await browser!.newPage();
    await page.goto(stack!.base);
    await page.getByLabel("API key or admin token").fill(key.json.apiKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Jobs" }).waitFor();
    await page.getByRole("link", { name: "Dead letters" }).waitFor();
    expect(await page.getByRole("link", { name: "New job" }).count()).toBe(0);
    expect(await page.getByRole("link", { name: "Audit log" }).count()).toBe(0);
    const job = await stack!.api(
      "POST",
      "/v1/jobs",
      { name: "read-only-view", schedule: { cron: "0 0 1 1 *" }, target: { url: `${receiver!.url}/hit/ro` } },
      { token: tenantKey },
    );
    expect(job.status, JSON.stringify(job.json)).toBe(201);
    await page.goto(`${stack!.base}/#/jobs/${job.json.id}`);
    await page.getByRole("heading", { name: "read-only-view" }).waitFor();
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    for (const name of ["Pause", "Trigger now"]) expect(await page.getByRole("button", { name }).count(), name).toBe(0);
    // A page reached by its address says what the key may not do, rather than failing on a call.
    await page.goto(`${stack!.base}/#/jobs/new`);
    await page.getByText("This key may not create jobs").waitFor();
    expect(await page.getByLabel("Cron expression").count()).toBe(0);
    await page.close();
  });
});

describe("API reference", () => {
  it("renders every section of /openapi.json from the Worker's own script, reaching no other host", async () => {
    const page = await browser!.newPage();
    const elsewhere: string[] = [];
    page.on("request", (request) => {
      if (new URL(request.url()).origin !== stack!.base) elsewhere.push(request.url());
    });
    await page.goto(`${stack!.base}/docs`);
    // The first section is drawn at once, the others' entries in the sidebar (Scalar draws them as they scroll in).
    await page.getByRole("heading", { name: "Jobs", exact: true }).waitFor();
    // An operation of the first section drawn (its first is the batch create, then the single one).
    await page
      .getByRole("heading", { name: /^Create / })
      .first()
      .waitFor();
    for (const tag of ["Runs", "Schedules", "Tenants", "API keys", "Metrics"]) await page.getByText(tag, { exact: true }).first().waitFor();
    await page.screenshot({ path: `${SHOTS}docs.png` });
    expect(elsewhere).toEqual([]);
    await page.close();
  });
});

async function hitsOf(name: string): Promise<number> {
  const log = await fetch(`${receiver!.url}/log/${name}`);
  return ((await log.json()) as unknown[]).length;
}
