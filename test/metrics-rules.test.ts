// deploy/prometheus/hanzo-ml.rules: every alert of spec 000 is there, and every series a rule reads is one the
// API exports (a renamed metric would otherwise silence an alert without any error).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../api/metrics.js';
import { testConfig } from './support/config.js';
import type { Db } from '../db/client.js';

interface Rules {
  groups: { name: string; rules: { alert: string; expr: string; labels: { severity: string }; annotations: { summary: string } }[] }[];
}

describe('Prometheus alert rules', () => {
  const rules = parse(readFileSync(join(import.meta.dirname, '..', 'deploy', 'prometheus', 'hanzo-ml.rules'), 'utf8')) as Rules;
  const all = rules.groups.flatMap((g) => g.rules);

  it('cover job failures, stalled training and stale checkpoints', () => {
    expect(all.map((r) => r.alert)).toEqual(expect.arrayContaining(['HanzoMLJobFailed', 'HanzoMLTrainingStalled', 'HanzoMLCheckpointStale']));
    for (const r of all) expect([r.alert, r.labels.severity, r.annotations.summary.length > 0]).toEqual([r.alert, expect.any(String), true]);
  });

  it('read only series the API exports', () => {
    // Only metric names are read here; nothing is collected, so no catalogue is needed.
    const exported = new Set(createMetrics(null as unknown as Db, testConfig().config).registry.getMetricsAsArray().map((m) => m.name));
    for (const r of all) {
      const names = [...r.expr.matchAll(/\b(hanzo_ml_\w+)/g)].map((m) => m[1]!);
      expect(names.length).toBeGreaterThan(0);
      for (const n of names) expect([r.alert, n, exported.has(n)]).toEqual([r.alert, n, true]);
    }
  });
});
