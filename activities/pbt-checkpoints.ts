// A population-based training member's checkpoints, in the object store with the layout every job's checkpoints
// have (contracts/job-io.ts): `checkpoints/{org}/{member run id}/{step}/` holding the state and a `manifest.json` written
// last (a prefix without it is no checkpoint), which lists each file's SHA-256. So any worker finds any member's
// checkpoint: a member exploiting another reads the source's round checkpoint wherever that member ran.
import { hostname } from 'node:os';
import { z } from 'zod';
import type { ActivityDeps } from './deps.js';
import { CheckpointManifestSchema } from '../contracts/trainer-job.js';
import { checkpointsUri } from '../lib/job-files.js';
import { sha256Text } from '../lib/hash.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

const STATE_FILE = 'state.json';
const MANIFEST_FILE = 'manifest.json';

/** A synthetic member's state at a checkpoint: where it is on its learning curve. */
export const PbtStateSchema = z.object({ step: z.number().int().nonnegative(), loss: z.number() });
export type PbtState = z.infer<typeof PbtStateSchema>;

/** What a member's checkpoint manifest says about the round beside the files: who wrote it and where it started. */
export const PbtRoundRecordSchema = z.object({
  sweep_id: z.string(),
  member: z.number().int().nonnegative(),
  round: z.number().int().nonnegative(),
  params: z.record(z.string(), z.unknown()),
  /** the checkpoint the round started from (the member's own or, exploiting, another member's); null for round 0 */
  started_from: z.string().nullable(),
  start: PbtStateSchema,
  gpu_seconds: z.number().nonnegative(),
  /** host:pid of the worker process that trained the round */
  writer: z.string(),
});
export type PbtRoundRecord = z.infer<typeof PbtRoundRecordSchema>;

const PbtManifestSchema = CheckpointManifestSchema.extend({ pbt: PbtRoundRecordSchema });

/** The process that writes a checkpoint, as its manifest names it. */
export const WRITER = `${hostname()}:${process.pid}`;

/** A member's checkpoint prefix at a step: checkpoints/{org}/{run}/{step}. */
export function pbtCheckpointUri(deps: ActivityDeps, organizationId: string, runId: string, step: number): string {
  return `${checkpointsUri(deps.store, deps.config, organizationId, runId)}/${step}`;
}

/** A member's checkpoint: its state, verified against its manifest, and the round record. Null when absent. */
export async function readPbtCheckpoint(deps: ActivityDeps, uri: string): Promise<{ state: PbtState; record: PbtRoundRecord } | null> {
  const text = await deps.store.readText(`${uri}/${MANIFEST_FILE}`);
  if (text === null) return null;
  const manifest = PbtManifestSchema.parse(JSON.parse(text));
  const entry = manifest.files.find((f) => f.path === STATE_FILE);
  const state = await deps.store.readText(`${uri}/${STATE_FILE}`);
  if (!entry || state === null || sha256Text(state) !== entry.sha256)
    throw nonRetryable(FailureType.BadCheckpoint, `${uri}/${STATE_FILE} does not match its manifest (sha256 ${state === null ? 'missing' : sha256Text(state)}, manifest ${entry?.sha256 ?? 'lists none'})`);
  return { state: PbtStateSchema.parse(JSON.parse(state)), record: manifest.pbt };
}

/** Writes a member's checkpoint: the state first, the manifest (with the round record) last. */
export async function writePbtCheckpoint(deps: ActivityDeps, uri: string, state: PbtState, record: PbtRoundRecord): Promise<void> {
  const text = JSON.stringify(state);
  await deps.store.putText(`${uri}/${STATE_FILE}`, text);
  const manifest = { step: state.step, created_at: new Date().toISOString(), files: [{ path: STATE_FILE, size_bytes: Buffer.byteLength(text), sha256: sha256Text(text) }], pbt: record };
  await deps.store.putText(`${uri}/${MANIFEST_FILE}`, JSON.stringify(manifest, null, 2));
}
