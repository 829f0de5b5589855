import { useState } from "preact/hooks";
import { ErrorText } from "../components/messages.tsx";
import { clientFor } from "../lib/session.ts";
import { messageOf } from "../lib/use-api.ts";

/** Asks for a tenant API key or the admin token and keeps it only once the API accepts it. */
export function SignIn({ onSignedIn }: { onSignedIn: (token: string) => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: Event) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await clientFor(token.trim()).jobs.list({ limit: 1 });
      onSignedIn(token.trim());
    } catch (err) {
      setError(messageOf(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="sign-in">
      <h1>edgecron</h1>
      <form onSubmit={submit}>
        <label for="token">API key or admin token</label>
        <input id="token" type="password" autocomplete="off" required value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        <p class="hint">Kept in this tab only, never stored beyond it.</p>
        <ErrorText message={error} />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
    </main>
  );
}
