// A submitted job's checkpoints in the object store, over all its segments (a segment that resumed from an older
// checkpoint writes under a prefix of its own). A checkpoint exists once its manifest does: {root}/{step}/manifest.json,
// uploaded last by the job (trainer/hanzo_ml/jobio/checkpoints.py).
import type { ObjectStore } from './object-store.js';
import { CheckpointManifestSchema } from '../contracts/trainer-job.js';
import type { JobSegment } from '../contracts/jobs.js';

export interface StoredCheckpoint {
  segment: number;
  step: number;
  /** the checkpoint's prefix: what a resume copies or resumes from */
  uri: string;
  created_at: string | null;
}

const MANIFEST = /\/(\d+)\/manifest\.json$/;

/** The complete checkpoints under one segment's prefix, oldest first. */
export async function checkpointsUnder(store: ObjectStore, segment: number, root: string): Promise<StoredCheckpoint[]> {
  const base = root.replace(/\/+$/, '');
  const out: StoredCheckpoint[] = [];
  for (const o of await store.list(base)) {
    const m = MANIFEST.exec(o.uri.slice(base.length));
    if (!m || o.uri.slice(base.length).split('/').length !== 3) continue;
    const manifest = await readManifest(store, o.uri);
    if (manifest === null) continue;
    out.push({ segment, step: Number(m[1]), uri: `${base}/${m[1]}`, created_at: manifest.created_at });
  }
  return out.sort((x, y) => x.step - y.step);
}

/** Every segment's checkpoints; a prefix two segments share is listed once, under the first. */
export async function jobCheckpoints(store: ObjectStore, segments: JobSegment[]): Promise<StoredCheckpoint[]> {
  const seen = new Set<string>();
  const out: StoredCheckpoint[] = [];
  for (const s of segments) {
    if (s.checkpoints_uri === null || seen.has(s.checkpoints_uri)) continue;
    seen.add(s.checkpoints_uri);
    out.push(...(await checkpointsUnder(store, s.segment, s.checkpoints_uri)));
  }
  return out;
}

/**
 * The checkpoint a resume names: a URI exactly, or a step (the newest segment's when several have it). Null when
 * the job has no such checkpoint.
 */
export function findCheckpoint(all: StoredCheckpoint[], ref: number | string): StoredCheckpoint | null {
  const wanted = typeof ref === 'string' && /^\d+$/.test(ref) ? Number(ref) : ref;
  const matches = all.filter((c) => (typeof wanted === 'number' ? c.step === wanted : c.uri === wanted.replace(/\/+$/, '')));
  return matches.sort((x, y) => x.segment - y.segment).at(-1) ?? null;
}

async function readManifest(store: ObjectStore, uri: string): Promise<{ created_at: string } | null> {
  try {
    const text = await store.readText(uri);
    const parsed = text === null ? null : CheckpointManifestSchema.safeParse(JSON.parse(text));
    return parsed?.success ? parsed.data : null;
  } catch {
    return null; // half-written or not JSON: not a checkpoint
  }
}
