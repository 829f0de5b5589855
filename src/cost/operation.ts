/**
 * An API request's operation name for the cost meter: its method and path with ids replaced,
 * so that every job's `GET /v1/jobs/:id` lands in one counter. Ids are the segments with a
 * digit or an underscore in them; the route words have neither.
 */
export function apiOperation(method: string, pathname: string): string {
  const path = pathname
    .split("/")
    .map((segment) => (/[\d_]/.test(segment) && segment !== "v1" ? ":id" : segment))
    .join("/");
  return `${method} ${path}`;
}
