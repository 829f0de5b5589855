/**
 * The grant key of what a run holds at its tenant's gate while in flight: one admission of one
 * run (`<run id>#<fence>`), and which permits it took with it. A key alone is a tenant permit
 * (as every key was before groups existed); `|g:<group>` adds a permit of that flow-control
 * group, and `|t` before it says the tenant permit is held too. The key is all a release or a
 * renewal carries, so the gate learns from it which tables to touch. Pure.
 */
export interface PermitHolding {
  /** `<run id>#<fence>`: never contains `|`. */
  base: string;
  tenant: boolean;
  group: string | null;
}

export function permitKey(h: PermitHolding): string {
  if (h.group === null) return h.base;
  return `${h.base}${h.tenant ? "|t" : ""}|g:${h.group}`;
}

export function parsePermitKey(key: string): PermitHolding {
  const bar = key.indexOf("|");
  if (bar < 0) return { base: key, tenant: true, group: null };
  const base = key.slice(0, bar);
  let rest = key.slice(bar + 1);
  const tenant = rest.startsWith("t|");
  if (tenant) rest = rest.slice(2);
  return { base, tenant, group: rest.startsWith("g:") ? rest.slice(2) : null };
}
