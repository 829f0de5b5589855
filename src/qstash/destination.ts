import { QstashInputError } from "./errors";

/**
 * The destination of POST /v2/publish/{destination} (and of enqueue and schedules): the rest of
 * the path, unencoded, as the SDK joins it, with the request's query string (the destination's
 * own). A proxy or URL normalisation can merge the `//` after the scheme into one (`https:/x`);
 * that is put back. What is not an http(s) URL is a URL group's name, or wrong.
 */
export type Destination = { url: string } | { topic: string };

const TOPIC_NAME = /^[A-Za-z0-9_.-]{1,100}$/;

export function parseDestination(rest: string, search: string): Destination {
  let raw = rest;
  try {
    raw = decodeURIComponent(rest);
  } catch {
    // Left as it came: a stray % is part of the URL.
  }
  const repaired = raw.replace(/^(https?):\/+/i, "$1://");
  if (/^https?:\/\//i.test(repaired)) {
    let url: URL;
    try {
      url = new URL(repaired + (search && !repaired.includes("?") ? search : ""));
    } catch {
      throw new QstashInputError("destination", `"${raw}" is not a valid URL`);
    }
    if (!url.hostname) throw new QstashInputError("destination", `"${raw}" has no host`);
    return { url: url.href };
  }
  if (TOPIC_NAME.test(raw)) return { topic: raw };
  throw new QstashInputError("destination", `"${raw}" is neither an http(s) URL nor a URL group name`);
}
