import { useMemo, useState } from "preact/hooks";
import { hrefOf, type Route, useRoute } from "./lib/route.ts";
import { clientFor, forgetToken, savedToken, saveToken } from "./lib/session.ts";
import { DeadLetters } from "./pages/dead-letters.tsx";
import { Job } from "./pages/job.tsx";
import { Jobs } from "./pages/jobs.tsx";
import { NewJob } from "./pages/new-job.tsx";
import { Preview } from "./pages/preview.tsx";
import { SignIn } from "./pages/sign-in.tsx";

const NAV: Array<[Route, string]> = [
  [{ page: "jobs" }, "Jobs"],
  [{ page: "dead-letters" }, "Dead letters"],
  [{ page: "preview" }, "Schedule preview"],
];

export function App() {
  const [token, setToken] = useState(savedToken);
  const route = useRoute();
  const client = useMemo(() => (token ? clientFor(token) : null), [token]);

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
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={hrefOf({ page: "jobs" })}>
          edgecron
        </a>
        <nav aria-label="Main">
          {NAV.map(([target, label]) => (
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
    </>
  );
}

function Page({ route, client }: { route: Route; client: NonNullable<ReturnType<typeof clientFor>> }) {
  switch (route.page) {
    case "job":
      return <Job key={route.id} client={client} id={route.id} />;
    case "new-job":
      return <NewJob client={client} />;
    case "dead-letters":
      return <DeadLetters client={client} />;
    case "preview":
      return <Preview client={client} />;
    default:
      return <Jobs client={client} />;
  }
}
