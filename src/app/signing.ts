import { notFound } from "../api/errors";
import { type Tenant, updateTenant } from "../catalog/tenants";
import { Misconfigured } from "../config";
import { DEFAULT_TENANT } from "../model/ids";
import { signingSecrets } from "../security/signing";
import { audit, entryOf } from "./audit";
import { type Caller, scopeOf } from "./caller";
import { loadTenant, pushSettings } from "./tenants";

export interface SigningKeys {
  tenantId: string;
  current: string;
  next: string;
  /** Requests also carry the first scheme, Edgecron-Signature, beside Edgecron-Signature-V2. */
  legacySignature: boolean;
}

/** The tenant a signing-keys call is about: the caller's own, or for the admin the one named. */
async function signingTenant(env: Env, caller: Caller, named: string | undefined): Promise<Tenant> {
  const own = scopeOf(caller);
  if (own !== null && named !== undefined && named !== own) throw notFound("tenant", named);
  return loadTenant(env, caller, own ?? named ?? DEFAULT_TENANT);
}

async function keysOf(env: Env, tenant: Tenant): Promise<SigningKeys> {
  const { current, next } = await signingSecrets(env.SIGNING_SECRET, tenant.id, tenant.signingGeneration).catch((err: Error) => {
    throw new Misconfigured(err.message);
  });
  return { tenantId: tenant.id, current, next, legacySignature: tenant.legacySignature };
}

export async function signingKeys(env: Env, caller: Caller, named: string | undefined): Promise<SigningKeys> {
  return keysOf(env, await signingTenant(env, caller, named));
}

/**
 * Turns the first scheme on or off for the tenant's requests (V2 is always sent). Off is the end
 * of its deprecation for that tenant: targets must verify Edgecron-Signature-V2 by then.
 */
export async function setLegacySignature(env: Env, caller: Caller, named: string | undefined, on: boolean): Promise<SigningKeys> {
  const before = await signingTenant(env, caller, named);
  if (before.legacySignature === on) return keysOf(env, before);
  const entry = entryOf(caller, {
    tenantId: before.id,
    action: "signing.schemes",
    subject: before.id,
    // As the schemes sent ("signature" in a field's name would be redacted as a secret).
    before: { schemes: schemesOf(before.legacySignature) },
    after: { schemes: schemesOf(on) },
  });
  const tenant = await updateTenant(env.DB, before.id, { legacySignature: on }, [audit(env.DB, entry, { ifChanged: true })]);
  if (!tenant) throw notFound("tenant", before.id);
  await pushSettings(env, tenant);
  return keysOf(env, tenant);
}

const schemesOf = (legacy: boolean) => (legacy ? ["v2", "v1"] : ["v2"]);

/** Next becomes current and a new next appears; shards sign with the new pair from now on. */
export async function rotateSigning(env: Env, caller: Caller, named: string | undefined): Promise<SigningKeys> {
  const before = await signingTenant(env, caller, named);
  // The generations only: the secrets themselves never enter the log.
  const entry = entryOf(caller, {
    tenantId: before.id,
    action: "signing.rotate",
    subject: before.id,
    before: { signingGeneration: before.signingGeneration },
    after: { signingGeneration: before.signingGeneration + 1 },
  });
  const tenant = await updateTenant(env.DB, before.id, { rotateSigning: true }, [audit(env.DB, entry, { ifChanged: true })]);
  if (!tenant) throw notFound("tenant", before.id);
  await pushSettings(env, tenant);
  return keysOf(env, tenant);
}
