import { useEffect, useMemo, useState } from "preact/hooks";
import { type Access, AccessContext, may, READ_ONLY, seesTenant, useAccess } from "./lib/access.ts";
import { hrefOf, type Route, useRoute } from "./lib/route.ts";
import { clientFor, forgetToken, savedToken, saveToken } from "./lib/session.ts";
import { Audit } from "./pages/audit.tsx";
import { DeadLetters } from "./pages/dead-letters.tsx";
import { Job } from "./pages/job.tsx";
import { Jobs } from "./pages/jobs.tsx";
import { NewJob } from "./pages/new-job.tsx";
import { Preview } from "./pages/preview.tsx";
import { SignIn } from "./pages/sign-in.tsx";

/** The pages, each shown only to a key that may use it (lib/access.ts). */
const NAV: Array<[Route, string, (access: Access) => boolean]> = [
  [{ page: "jobs" }, "Jobs", () => true],
  [{ page: "dead-letters" }, "Dead letters", seesTenant],
  [{ page: "preview" }, "Schedule preview", () => true],
  [{ page: "audit" }, "Audit log", (a) => seesTenant(a) && may(a, "admin")],
];

export function App() {
  const [token, setToken] = useState(savedToken);
  const route = useRoute();
  const client = useMemo(() => (token ? clientFor(token) : null), [token]);
  const [access, setAccess] = useState<Access>(READ_ONLY);
  useEffect(() => {
    setAccess(READ_ONLY);
    client?.me().then(
      (me) => setAccess({ scopes: me.scopes, jobPrefix: me.jobPrefix, known: true }),
      // Unknown: the narrowest, so that nothing the key may not do is offered.
      () => setAccess({ ...READ_ONLY, known: true }),
    );
  }, [client]);

  if (!client)
    return (
      <SignIn
        onSignedIn={(t) => {
          saveToken(t);
          setToken(t);
        }}
      />
    );
  return (
    <AccessContext.Provider value={access}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={hrefOf({ page: "jobs" })}>
          edgecron
        </a>
        <nav aria-label="Main">
          {NAV.filter(([, , shown]) => shown(access)).map(([target, label]) => (
            <a key={label} href={hrefOf(target)} aria-current={target.page === route.page ? "page" : undefined}>
              {label}
            </a>
          ))}
          <a href="/docs">API reference</a>
        </nav>
        <button
          type="button"
          class="secondary"
          onClick={() => {
            forgetToken();
            setToken(null);
          }}
        >
          Sign out
        </button>
      </header>
      <main id="main">
        <Page route={route} client={client} />
      </main>
    </AccessContext.Provider>
  );
}

function Page({ route, client }: { route: Route; client: NonNullable<ReturnType<typeof clientFor>> }) {
  const access = useAccess();
  // A page reached by its address that the key may not use says so, rather than failing on its first call.
  const refused = (what: string) =>
    access.known ? <p class="warning">This key may not {what}: ask for a key with more scopes.</p> : <p aria-live="polite">Loading…</p>;
  switch (route.page) {
    case "job":
      return <Job key={route.id} client={client} id={route.id} />;
    case "new-job":
      return may(access, "write") ? <NewJob client={client} /> : refused("create jobs");
    case "dead-letters":
      return seesTenant(access) ? <DeadLetters client={client} /> : refused("see the whole tenant's dead letters");
    case "preview":
      return <Preview client={client} />;
    case "audit":
      return seesTenant(access) && may(access, "admin") ? <Audit client={client} /> : refused("read the audit log");
    default:
      return <Jobs client={client} />;
  }
}
