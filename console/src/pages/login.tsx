// Sign in with an API token: the API keeps it in an HttpOnly cookie (the page never stores it) and answers with the
// session, whose CSRF token the console sends with each change it asks for. Where the API signs in through the IAM
// (OIDC with PKCE), a link starts that login; the API sends the browser back here with an error if it fails. A
// session that ended while in use (expired, or its IAM token not renewed) lands here saying why.
import { useEffect, useState } from 'preact/hooks';
import type { SessionView } from '../../../contracts/console-session.js';
import { api, ApiFailure, signIn, takeSessionEndedReason } from '../api.js';

export function LoginPage({ onSignedIn }: { onSignedIn: (s: SessionView) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(() => new URLSearchParams(location.search).get('error') ?? takeSessionEndedReason());
  const [busy, setBusy] = useState(false);
  const [oidc, setOidc] = useState(false);
  useEffect(() => {
    api<{ oidc: boolean }>('GET', '/v1/session/options')
      .then((o) => setOidc(o.oidc))
      .catch(() => setOidc(false));
  }, []);
  const next = new URLSearchParams(location.search).get('next') ?? '/jobs';
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onSignedIn(await signIn(token));
    } catch (err) {
      setError(err instanceof ApiFailure ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="login">
      <form onSubmit={submit} aria-label="sign in">
        <h1>hanzo-ml</h1>
        {oidc && (
          <p>
            <a class="button" href={`/v1/session/oidc/start?next=${encodeURIComponent(next)}`}>
              Sign in with Hanzo IAM
            </a>
          </p>
        )}
        <label for="token">API token</label>
        <input id="token" name="token" type="password" autocomplete="off" value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} />
        <p class="muted">An admin makes one with <code>hanzo-ml token create</code>. It is kept in an HttpOnly cookie, not by this page.</p>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy || token.trim() === ''}>
          Sign in
        </button>
      </form>
    </main>
  );
}
