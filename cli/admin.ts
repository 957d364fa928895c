// `hanzo-ml admin bootstrap`: the first administrator of a new catalogue. No API token exists yet, so it talks to
// the catalogue directly (database.url, or the PGlite of HANZO_ML_HOME), like `serve` and `worker` do; it runs
// the migrations first, so it works on an empty database. Once per catalogue: a second call refuses.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../lib/config.js';
import { openCatalogue } from '../db/client.js';
import { bootstrapOperator } from '../db/repo/auth.js';

export interface AdminBootstrapOptions {
  subject: string;
  /** write the token to this file (mode 0600) instead of printing it */
  tokenFile?: string;
}

export async function runAdminBootstrap(o: AdminBootstrapOptions): Promise<void> {
  const { config, home } = loadConfig();
  const organization = config.auth.dev_organization;
  const catalogue = await openCatalogue({ url: config.database.url, pgliteDir: join(home, 'pg') });
  try {
    const created = await bootstrapOperator(catalogue.db, { organizationId: organization, subject: o.subject });
    const summary = { organization, subject: o.subject, role: 'ml-admin', approver: true, token_id: created.id };
    if (o.tokenFile) {
      writeFileSync(o.tokenFile, created.token + '\n', { mode: 0o600, flag: 'wx' });
      process.stdout.write(JSON.stringify({ ...summary, token_file: o.tokenFile }, null, 2) + '\n');
    } else {
      process.stdout.write(JSON.stringify({ ...summary, token: created.token }, null, 2) + '\n');
    }
    process.stderr.write(`admin bootstrap: organization "${organization}" and its first ml-admin "${o.subject}" created; the token is shown once (only its hash is stored)\n`);
  } finally {
    await catalogue.close();
  }
}
