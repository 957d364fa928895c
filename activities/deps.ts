import type { JobDeps } from '../jobs/deps.js';

/** Everything activities touch, injected (no module-level singletons): what jobs need, and a little more. */
export interface ActivityDeps extends JobDeps {
  home: string;
  /** URL jobs use for the tracking API */
  trackingUri: string;
}
