// The console: sign in, then the app shell (navigation, who is signed in) around the page of the current URL.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type { SessionView } from '../../contracts/console-session.js';
import { currentSession, signOut, whenSessionEnds } from './api.js';
import { linkHandler, navigate, useRoute } from './router.js';
import { ApprovalPage } from './pages/approval.js';
import { ComparePage } from './pages/compare.js';
import { ExperimentPage, ExperimentsPage } from './pages/experiments.js';
import { JobPage } from './pages/job.js';
import { JobsPage } from './pages/jobs.js';
import { LoginPage } from './pages/login.js';
import { NewFineTunePage } from './pages/new.js';
import { ModelVersionPage } from './pages/model.js';
import { ModelsPage } from './pages/models.js';
import { SweepPage } from './pages/sweep.js';
import { SweepsPage } from './pages/sweeps.js';
import { QueuesPage } from './pages/queues.js';
import './styles.css';

function App() {
  const route = useRoute();
  const [session, setSession] = useState<SessionView | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    currentSession()
      .then(setSession)
      .catch((e: Error) => setError(e.message));
  }, []);
  // A request answered 401 (the session expired, or the IAM would not renew its token): the login page.
  useEffect(() => whenSessionEnds(() => setSession(null)), []);
  // Signed out (or the session ended): the login page, and back to the page asked for once signed in.
  useEffect(() => {
    if (session === null && route.page !== 'login') navigate(`/login?next=${encodeURIComponent(location.pathname)}`, true);
  }, [session, route.page]);

  if (error) return <p class="error">{error}</p>;
  if (session === undefined) return <p class="muted">loading…</p>;
  if (session === null || route.page === 'login')
    return (
      <LoginPage
        onSignedIn={(s) => {
          setSession(s);
          const next = new URLSearchParams(location.search).get('next');
          navigate(next && next.startsWith('/') && !next.startsWith('//') ? next : '/jobs', true);
        }}
      />
    );
  return (
    <>
      <header class="shell">
        <a class="brand" href="/jobs" onClick={linkHandler('/jobs')}>
          hanzo-ml
        </a>
        <nav>
          <a href="/jobs" onClick={linkHandler('/jobs')} class={route.page === 'jobs' || route.page === 'job' ? 'active' : ''}>
            Jobs
          </a>
          <a href="/new" onClick={linkHandler('/new')} class={route.page === 'new' ? 'active' : ''}>
            New fine-tune
          </a>
          <a href="/models" onClick={linkHandler('/models')} class={route.page === 'models' || route.page === 'model' ? 'active' : ''}>
            Models
          </a>
          <a href="/sweeps" onClick={linkHandler('/sweeps')} class={route.page === 'sweeps' || route.page === 'sweep' ? 'active' : ''}>
            Sweeps
          </a>
          {session.role === 'ml-admin' && (
            <a href="/queues" onClick={linkHandler('/queues')} class={route.page === 'queues' ? 'active' : ''}>
              Queues
            </a>
          )}
          <a href="/experiments" onClick={linkHandler('/experiments')} class={route.page === 'experiments' || route.page === 'experiment' || route.page === 'compare' ? 'active' : ''}>
            Experiments
          </a>
          <a href="/mlflow/">Runs (MLflow)</a>
        </nav>
        <span class="who">
          {session.subject} · {session.organization} · {session.role}
          {session.approver && session.role !== 'ml-admin' ? ' (approver)' : ''}
        </span>
        <button
          type="button"
          class="link"
          onClick={() =>
            void signOut().then(() => {
              setSession(null);
            })
          }
        >
          Sign out
        </button>
      </header>
      {route.page === 'jobs' && <JobsPage />}
      {route.page === 'job' && <JobPage id={route.id} session={session} />}
      {route.page === 'approval' && <ApprovalPage id={route.id} session={session} />}
      {route.page === 'new' && <NewFineTunePage />}
      {route.page === 'models' && <ModelsPage />}
      {route.page === 'model' && <ModelVersionPage name={route.name} version={route.version} />}
      {route.page === 'sweeps' && <SweepsPage />}
      {route.page === 'sweep' && <SweepPage id={route.id} />}
      {route.page === 'queues' && <QueuesPage organization={session.organization} />}
      {route.page === 'experiments' && <ExperimentsPage />}
      {route.page === 'experiment' && <ExperimentPage id={route.id} />}
      {route.page === 'compare' && <ComparePage />}
      {route.page === 'missing' && (
        <main>
          <h1>Not found</h1>
          <p>The console has no page at {route.path}.</p>
        </main>
      )}
    </>
  );
}

render(<App />, document.getElementById('app')!);
