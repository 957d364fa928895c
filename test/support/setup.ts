// Per test file: Temporal's own log at warnings, and one temporary directory that holds every other.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import { DefaultLogger, Runtime } from '@temporalio/worker';

Runtime.install({ logger: new DefaultLogger('WARN') });

// os.tmpdir() reads TMPDIR on each call, and the stacks' servers and trainer processes inherit it: pointing it at
// a directory of this file's own puts every HANZO_ML_HOME, database, bucket and job work directory under one
// root, removed when the file ends (a stack's home holds several hundred MB; left behind, a few runs fill the disk).
const root = mkdtempSync(join(process.env.TMPDIR ?? tmpdir(), 'hanzo-ml-vitest-'));
// Open like /tmp itself (sticky, everyone may create): the test Postgres runs as the postgres user, and a job's
// process may run as another user than this one.
chmodSync(root, 0o1777);
process.env.TMPDIR = root;

// Registered first, so it runs after the file's own afterAll hooks (vitest runs after-hooks as a stack), once the
// file's stacks have stopped.
afterAll(() => {
  rmSync(root, { recursive: true, force: true, maxRetries: 3, retryDelay: 200 });
});
