import { useEffect, useState } from "preact/hooks";

/**
 * Pages are addressed by the URL's hash (#/jobs/job_123), so every page is a link that can be
 * bookmarked and the Worker needs no fallback route: `/` is the only HTML file it serves.
 */
export type Route =
  | { page: "jobs" }
  | { page: "new-job" }
  | { page: "job"; id: string }
  | { page: "dead-letters" }
  | { page: "preview" }
  | { page: "audit" };

function parseRoute(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1] === "new") return { page: "new-job" };
  if (parts[0] === "jobs" && parts[1]) return { page: "job", id: parts[1] };
  if (parts[0] === "dead-letters") return { page: "dead-letters" };
  if (parts[0] === "preview") return { page: "preview" };
  if (parts[0] === "audit") return { page: "audit" };
  return { page: "jobs" };
}

export function hrefOf(route: Route): string {
  return route.page === "job" ? `#/jobs/${encodeURIComponent(route.id)}` : route.page === "new-job" ? "#/jobs/new" : `#/${route.page}`;
}

export function navigate(route: Route): void {
  location.hash = hrefOf(route);
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(location.hash));
    addEventListener("hashchange", onChange);
    return () => removeEventListener("hashchange", onChange);
  }, []);
  return route;
}
