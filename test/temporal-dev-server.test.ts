// The embedded Temporal's start: a server that exits before answering (as one that lost a race for a port does)
// is started again, a port taken for good fails with the server's own words, and `port: 0` picks a free one.
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { afterAll, describe, expect, it } from 'vitest';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { testConfig } from './support/config.js';

const { bootstrap } = testConfig();
const started: DevServer[] = [];
afterAll(async () => {
  for (const s of started) await s.stop();
});

function home(): string {
  const dir = mkdtempSync(join(tmpdir(), 'temporal-start-'));
  mkdirSync(join(dir, 'logs'));
  return dir;
}

describe('temporal dev server start', () => {
  it('starts again when the first start exits before answering', async () => {
    const dir = home();
    // Stand-in for a server that lost a port race: the first start exits with Go's fatal code, the next is real.
    const wrapper = join(dir, 'temporal-flaky');
    writeFileSync(wrapper, `#!/bin/sh\nif [ ! -e "${dir}/tried" ]; then touch "${dir}/tried"; echo "bind: address already in use" >&2; exit 2; fi\nexec "${bootstrap.temporal}" "$@"\n`);
    chmodSync(wrapper, 0o755);
    const server = await startTemporalDevServer({ binary: wrapper, home: dir, port: 0, uiPort: null, namespace: 'default' });
    started.push(server);
    const conn = await Connection.connect({ address: server.address });
    const info = await conn.workflowService.getSystemInfo({});
    expect(info.serverVersion).toBeTruthy();
    await conn.close();
  });

  it('fails with the server\'s own words when its port stays taken', async () => {
    const holder: Server = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
    const port = (holder.address() as { port: number }).port;
    try {
      await expect(startTemporalDevServer({ binary: bootstrap.temporal, home: home(), port, uiPort: null, namespace: 'default' }))
        .rejects.toThrow(/exited with code \d+: .*address already in use/);
    } finally {
      holder.close();
    }
  });
});
