import { Hono } from "hono";
import { z } from "zod";
import { seesSealed } from "../../app/caller";
import { tenantOf } from "../../app/qstash/tenant";
import { addEndpoints, deleteUrlGroup, listUrlGroups, MAX_ENDPOINTS, readUrlGroup, removeEndpoints } from "../../app/qstash/url-groups";
import type { Endpoint, TopicRow } from "../../catalog/qstash";
import { QstashInputError } from "../../qstash/errors";
import { reducedUrl } from "../../security/reduced";
import type { AppContext, AppEnv } from "../context";
import { bodyText } from "./request";

/** /v2/topics: URL groups. A publish to a group's name fans out: one message per endpoint. */
export const topics = new Hono<AppEnv>();

const EndpointSchema = z.object({
  name: z.string().min(1).max(100).optional(),
  url: z
    .url({ protocol: /^https?$/, error: "must be an absolute http or https URL" })
    .max(2_048)
    .optional(),
});
const Body = z.object({ endpoints: z.array(EndpointSchema).min(1).max(MAX_ENDPOINTS) });

async function endpointsOf(c: AppContext): Promise<Array<z.infer<typeof EndpointSchema>>> {
  let json: unknown;
  try {
    json = JSON.parse(await bodyText(c));
  } catch {
    throw new QstashInputError("body", "not JSON: send { endpoints: [{ name?, url }] }");
  }
  const parsed = Body.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new QstashInputError(issue.path.join(".") || "body", issue.message);
  }
  return parsed.data.endpoints;
}

/** A URL group; its endpoints' URLs (sealed at rest) reduced to their origins for a `read` key. */
const present = (t: TopicRow, whole: boolean) => ({
  name: t.name,
  endpoints: whole ? t.endpoints : t.endpoints.map((e) => ({ ...e, url: reducedUrl(e.url) })),
  createdAt: t.createdAt,
  updatedAt: t.updatedAt,
});
const TOPIC_NAME = /^[A-Za-z0-9_.-]{1,100}$/;

topics.post("/topics/:name/endpoints", async (c) => {
  const name = c.req.param("name");
  if (!TOPIC_NAME.test(name)) throw new QstashInputError("name", "1 to 100 letters, digits, _ . or -");
  const added = await endpointsOf(c);
  const missing = added.findIndex((e) => e.url === undefined);
  if (missing >= 0) throw new QstashInputError(`endpoints.${missing}.url`, "required");
  await addEndpoints(c.env, c.var.caller, name, added as Endpoint[]);
  return c.json({}, 200);
});

topics.delete("/topics/:name/endpoints", async (c) => {
  const name = c.req.param("name");
  const removed = await endpointsOf(c);
  if (!(await removeEndpoints(c.env, c.var.caller, name, removed))) throw new QstashInputError("name", `no URL group named ${name}`, 404);
  return c.json({}, 200);
});

topics.get("/topics", async (c) =>
  c.json(
    (await listUrlGroups(c.env, tenantOf(c.var.caller))).map((t) => present(t, seesSealed(c.var.caller))),
    200,
  ),
);

topics.get("/topics/:name", async (c) => {
  const topic = await readUrlGroup(c.env, tenantOf(c.var.caller), c.req.param("name"));
  if (!topic) throw new QstashInputError("name", `no URL group named ${c.req.param("name")}`, 404);
  return c.json(present(topic, seesSealed(c.var.caller)), 200);
});

topics.delete("/topics/:name", async (c) => {
  if (!(await deleteUrlGroup(c.env, c.var.caller, c.req.param("name")))) {
    throw new QstashInputError("name", `no URL group named ${c.req.param("name")}`, 404);
  }
  return c.json({}, 200);
});
