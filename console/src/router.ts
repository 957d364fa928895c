// The console's pages by path, with the History API: every page is a URL the API answers with index.html.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { page: 'jobs' }
  | { page: 'job'; id: string }
  | { page: 'approval'; id: string }
  | { page: 'models' }
  | { page: 'model'; name: string; version: string }
  | { page: 'sweeps' }
  | { page: 'sweep'; id: string }
  | { page: 'login' }
  | { page: 'new' }
  | { page: 'queues' }
  | { page: 'experiments' }
  | { page: 'experiment'; id: string }
  | { page: 'compare' }
  | { page: 'missing'; path: string };

export function routeOf(path: string): Route {
  if (path === '/' || path === '/jobs') return { page: 'jobs' };
  if (path === '/login') return { page: 'login' };
  if (path === '/new') return { page: 'new' };
  if (path === '/queues') return { page: 'queues' };
  const job = /^\/jobs\/([^/]+)$/.exec(path);
  if (job) return { page: 'job', id: decodeURIComponent(job[1]!) };
  if (path === '/experiments') return { page: 'experiments' };
  const experiment = /^\/experiments\/([^/]+)$/.exec(path);
  if (experiment) return { page: 'experiment', id: decodeURIComponent(experiment[1]!) };
  if (path === '/compare') return { page: 'compare' };
  const approval = /^\/pipelines\/([^/]+)\/approval$/.exec(path);
  if (approval) return { page: 'approval', id: decodeURIComponent(approval[1]!) };
  if (path === '/models') return { page: 'models' };
  const model = /^\/models\/([^/]+)\/([^/]+)$/.exec(path);
  if (model) return { page: 'model', name: decodeURIComponent(model[1]!), version: decodeURIComponent(model[2]!) };
  if (path === '/sweeps') return { page: 'sweeps' };
  const sweep = /^\/sweeps\/([^/]+)$/.exec(path);
  if (sweep) return { page: 'sweep', id: decodeURIComponent(sweep[1]!) };
  return { page: 'missing', path };
}

const listeners = new Set<() => void>();

export function navigate(path: string, replace = false): void {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  listeners.forEach((l) => l());
}

export function useRoute(): Route {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    listeners.add(update);
    window.addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      window.removeEventListener('popstate', update);
    };
  }, []);
  return routeOf(path);
}

/** A link that changes page without reloading the console. */
export function linkHandler(path: string): (e: MouseEvent) => void {
  return (e) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
    e.preventDefault();
    navigate(path);
  };
}
