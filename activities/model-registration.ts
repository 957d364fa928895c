// The copy of a model version's files of record, as an activity: every file of every format is copied under the
// version's prefix in the models bucket (S3 multipart above storage.multipart_threshold, file:// streamed) and
// hashed as stored, each format gets its manifest, and the version turns ready. Bad sources (a missing file, an
// unreadable config.json, a GGUF whose digest changed) fail the registration for good: whatever was copied is
// removed and the version is failed_registration with a message naming the file. A store that fails is retried
// (the activity starts over; each copy overwrites the same keys, so the result is the same).
import { Context } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import { completeRegistration, versionById, type ModelVersionRow } from '../db/repo/models.js';
import { copyJobTotalsToVersion } from '../db/repo/usage.js';
import {
  describeModel,
  ModelArtifactError,
  publishFormat,
  readSourceJson,
  versionChecksum,
  versionPrefix,
  type ModelDescription,
} from '../lib/model-artifacts.js';
import type { FormatArtifact } from '../contracts/models.js';
import { ModelRegistrationInputSchema, type ModelRegistrationInput, type ModelRegistrationResult } from '../contracts/model-registration.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';

/** Heartbeats when running as an activity (a direct call, as tests make, has no activity context). */
function progressReporter(): (details: Record<string, unknown>) => void {
  let ctx: Context | null = null;
  try {
    ctx = Context.current();
  } catch {
    return () => undefined;
  }
  return (details) => ctx.heartbeat(details);
}

function resultOf(row: ModelVersionRow): ModelRegistrationResult {
  return {
    status: row.status === 'ready' ? 'ready' : 'failed_registration',
    message: row.statusMessage,
    artifacts: row.artifacts as Record<string, unknown>,
    checksum: row.checksum,
  };
}

const DELETED: ModelRegistrationResult = { status: 'deleted', message: 'the version was deleted while its files were copied', artifacts: {}, checksum: null };

export function createModelRegistrationActivities(deps: ActivityDeps) {
  const bucket = deps.config.storage.buckets.models;

  /** Removes everything under the version's prefix: a failed or abandoned registration keeps nothing partial. */
  async function discard(input: ModelRegistrationInput): Promise<void> {
    await deps.store.deletePrefix(bucket, versionPrefix(input.organization_id, input.model_name, input.version));
  }

  async function describe(input: ModelRegistrationInput): Promise<ModelDescription> {
    if (input.description) return input.description;
    const files = input.formats.flatMap((f) => f.files);
    return describeModel(await readSourceJson(deps.store, files, 'config.json'), await readSourceJson(deps.store, files, 'adapter_config.json'));
  }

  async function copyAll(input: ReturnType<typeof ModelRegistrationInputSchema.parse>): Promise<{ artifacts: Record<string, FormatArtifact>; description: ModelDescription }> {
    const description = await describe(input);
    const prefix = versionPrefix(input.organization_id, input.model_name, input.version);
    const report = progressReporter();
    const artifacts: Record<string, FormatArtifact> = {};
    let before = 0;
    for (const f of input.formats) {
      const done = before;
      const published = await publishFormat(deps.store, {
        bucket,
        prefix,
        format: f.format,
        files: f.files,
        model: input.model_name,
        version: input.version,
        description,
        onProgress: (n) => report({ format: f.format, bytes_done: done + n, total_bytes: input.total_bytes }),
      });
      for (const [path, want] of Object.entries(f.expect_sha256)) {
        const got = published.manifest.files.find((e) => e.path === path)?.sha256;
        if (got !== want) throw new ModelArtifactError(`format ${f.format}: ${path} changed before it was registered (sha256 ${got ?? 'missing'}, expected ${want})`);
      }
      before += published.artifact.size_bytes * 2;
      artifacts[f.format] = published.artifact;
    }
    return { artifacts, description };
  }

  return {
    /**
     * Copies and hashes a pending version's files and marks it ready. Bad artifacts mark it failed_registration
     * (its partial copy removed) and fail with the non-retryable type BadArtifacts; a version that is already
     * ready or failed is answered as it is, and one deleted meanwhile has its copy removed.
     */
    async publishModelVersion(raw: ModelRegistrationInput): Promise<ModelRegistrationResult> {
      const input = ModelRegistrationInputSchema.parse(raw);
      const row = await versionById(deps.db, input.version_id);
      if (!row) {
        await discard(input);
        return DELETED;
      }
      if (row.status !== 'pending_registration') return resultOf(row);
      let copied: Awaited<ReturnType<typeof copyAll>>;
      try {
        copied = await copyAll(input);
      } catch (err) {
        if (!(err instanceof ModelArtifactError)) throw err;
        // An attempt presumed lost may still run beside its retry: never remove the files of a finished version.
        const now = await versionById(deps.db, input.version_id);
        if (now && now.status !== 'pending_registration') return resultOf(now);
        const message = `version ${input.version} of model "${input.model_name}" not registered: ${err.message}`;
        await discard(input);
        await completeRegistration(deps.db, input.version_id, { artifacts: {}, checksum: null, failed: true, message });
        throw nonRetryable(FailureType.BadArtifacts, message);
      }
      const { artifacts, description } = copied;
      const done = await completeRegistration(deps.db, input.version_id, {
        artifacts,
        checksum: versionChecksum(artifacts),
        source: input.source_format ? (artifacts[input.source_format]?.path ?? null) : null,
        architecture: description.architecture,
        baseModel: description.base_model,
        method: description.method,
      });
      if (done) {
        if (done.runId) await copyJobTotalsToVersion(deps.db, done.id, done.runId);
        return resultOf(done);
      }
      const now = await versionById(deps.db, input.version_id);
      if (now) return resultOf(now);
      await discard(input);
      return DELETED;
    },

    /**
     * Ends a registration whose copy could not finish (retries spent, cancelled): its partial copy is removed and a
     * still-pending version becomes failed_registration with the reason.
     */
    async failModelRegistration(a: { input: ModelRegistrationInput; message: string }): Promise<ModelRegistrationResult> {
      const row = await versionById(deps.db, a.input.version_id);
      if (row && row.status !== 'pending_registration') return resultOf(row);
      await discard(a.input);
      if (!row) return DELETED;
      const message = `version ${a.input.version} of model "${a.input.model_name}" not registered: ${a.message}`;
      const failed = await completeRegistration(deps.db, a.input.version_id, { artifacts: {}, checksum: null, failed: true, message });
      return failed ? resultOf(failed) : DELETED;
    },
  };
}
