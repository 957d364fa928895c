// Test configuration: the product's own config loader, pointed at a temporary HANZO_ML_HOME.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type LoadedConfig } from '../../lib/config.js';

export function testConfig(env: Record<string, string> = {}): LoadedConfig {
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-test-'));
  // Tests of authentication need token-less requests refused, as on a shared server; the metrics endpoint
  // listens on a port the kernel picks, so stacks of parallel test files never collide.
  return loadConfig({ HANZO_ML_HOME: home, HANZO_ML_LOGGING_LEVEL: 'warn', HANZO_ML_AUTH_ANONYMOUS_ROLE: 'none', HANZO_ML_METRICS_PORT: '0', ...env });
}

export const DEV_TOKEN = 'hanzo-ml-dev-token';
export const auth = { authorization: `Bearer ${DEV_TOKEN}` };
