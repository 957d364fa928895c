// A submitted job's checkpoints as resume and GET /v1/jobs/{id} see them (lib/job-checkpoints.ts): only complete
// ones (a manifest that parses), per segment prefix, and a from_checkpoint found by step or URI, the newest
// segment's first.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FileObjectStore, objectUri } from '../lib/object-store.js';
import { findCheckpoint, jobCheckpoints } from '../lib/job-checkpoints.js';
import type { JobSegment } from '../contracts/jobs.js';

const manifest = (step: number) => JSON.stringify({ step, created_at: `2026-01-01T00:00:0${step % 10}Z`, files: [] });

async function world() {
  const store = new FileObjectStore(mkdtempSync(join(tmpdir(), 'job-ckpt-')));
  const first = objectUri(store, 'checkpoints', 'checkpoints/dev/run-1');
  const branch = objectUri(store, 'checkpoints', 'checkpoints/dev/run-1-s3');
  await store.putText(`${first}/5/manifest.json`, manifest(5));
  await store.putText(`${first}/5/adapter.safetensors`, 'w');
  await store.putText(`${first}/10/manifest.json`, manifest(10));
  await store.putText(`${first}/15/adapter.safetensors`, 'no manifest yet: not a checkpoint');
  await store.putText(`${first}/20/manifest.json`, '{"half-written');
  await store.putText(`${first}/best/manifest.json`, manifest(10));
  await store.putText(`${branch}/5/manifest.json`, manifest(5));
  await store.putText(`${branch}/8/manifest.json`, manifest(8));
  const seg = (segment: number, uri: string): JobSegment => ({ segment, job_name: `j-s${segment}-train`, checkpoints_uri: uri, resumed_from: null, started_at: '2026-01-01T00:00:00Z' });
  return { store, first, branch, segments: [seg(1, first), seg(2, first), seg(3, branch)] };
}

describe('job checkpoints', () => {
  it('lists the complete checkpoints of each segment prefix once, oldest first, without best/', async () => {
    const { store, first, branch, segments } = await world();
    const all = await jobCheckpoints(store, segments);
    expect(all.map((c) => [c.segment, c.step, c.uri])).toEqual([
      [1, 5, `${first}/5`],
      [1, 10, `${first}/10`],
      [3, 5, `${branch}/5`],
      [3, 8, `${branch}/8`],
    ]);
  });

  it('finds a from_checkpoint by step (the newest segment having it) or by URI, and nothing else', async () => {
    const { store, first, branch, segments } = await world();
    const all = await jobCheckpoints(store, segments);
    expect(findCheckpoint(all, 5)?.uri).toBe(`${branch}/5`);
    expect(findCheckpoint(all, '10')?.uri).toBe(`${first}/10`);
    expect(findCheckpoint(all, `${first}/5/`)?.segment).toBe(1);
    expect(findCheckpoint(all, 15)).toBeNull();
    expect(findCheckpoint(all, `${first}/20`)).toBeNull();
    expect(findCheckpoint(all, 'file:///elsewhere/5')).toBeNull();
  });
});
