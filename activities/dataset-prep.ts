// The derive job: the trainer's prepare-dataset command through the job executor (local or Kubernetes), on the
// parent version's split files, then the new version copied from the job's outputs and recorded
// (datasets/derive.ts). The job is a child job of the parent
// dataset (`dataset:<parent id>`, type data_preparation) in GET /v1/jobs. A retry finds the version recorded by
// an earlier attempt (its id is chosen by the API), so one derive makes at most one version.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import { runJobToCompletion } from './run-job.js';
import { baseModelInput, fileInput, type JobInput } from '../jobs/inputs.js';
import { currentAttempt } from '../jobs/attempts.js';
import { defineJob, type JobDefinition } from '../jobs/definition.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';
import { PrepareReportSchema, type DatasetPreparationInput, type DatasetPreparationResult, type PrepareDatasetJobSpec, type PrepareReport } from '../contracts/data-prep.js';
import { SPLITS, type SplitName } from '../contracts/datasets.js';
import { parentSources, preparationJob, readIssues, storePreparedVersion, transformSummary, PrepareIssuesError, type PrepareIssue } from '../datasets/derive.js';
import { recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { getDataset, olderVersions, type DatasetRow } from '../db/repo/datasets.js';
import { copyPrefix, localPathFor } from '../lib/object-store.js';

export function createDatasetPrepActivities(deps: ActivityDeps) {
  return {
    async prepareDerivedDataset(input: DatasetPreparationInput): Promise<DatasetPreparationResult> {
      // An earlier attempt recorded the version (and may have stopped before its job said so).
      const done = await getDataset(deps.db, input.organization_id, input.dataset_id);
      if (done) {
        await setChildJobStatus(deps.db, input.job_id, 'succeeded', `version ${done.version} of "${done.name}" (${done.id})`);
        return resultOf(done);
      }
      const parent = await getDataset(deps.db, input.organization_id, input.parent_id);
      if (!parent) throw nonRetryable(FailureType.NotFound, `dataset ${input.parent_id} does not exist any more`);
      await recordChildJob(deps.db, preparationJob(input), 'running');
      const report = await runPreparation(deps, input, parent);
      const row = await storePreparedVersion(
        deps,
        {
          id: input.dataset_id,
          organizationId: input.organization_id,
          createdBy: input.requested_by,
          name: input.name,
          format: 'jsonl',
          tags: input.request.tags,
          transform: transformSummary(parent, input.request.operations),
          parentDatasets: [parent.id],
          report: report.report,
          tokenizer: input.tokenizer,
          extraMetadata: { derived_from: { id: parent.id, name: parent.name, version: parent.version }, job_id: input.job_id },
        },
        (bucket, prefix) => copyPrefix(deps.store, report.output, bucket, prefix),
      );
      await setChildJobStatus(deps.db, input.job_id, 'succeeded', `version ${row.version} of "${row.name}" (${row.id})`);
      return resultOf(row);
    },

    /** The preparation failed for good or was cancelled: its job says why (the issues, on bad input). */
    async failDatasetPreparation(a: { input: DatasetPreparationInput; message: string; cancelled?: boolean }): Promise<void> {
      await recordChildJob(deps.db, preparationJob(a.input), a.cancelled ? 'cancelled' : 'failed', a.message);
    },
  };
}

const resultOf = (row: DatasetRow): DatasetPreparationResult => ({ dataset_id: row.id, version: row.version, sha256: row.sha256 });

/**
 * The prepare-dataset job, the same on every executor: each path of its spec is an input or output field of the
 * envelope, so the job runner fetches the parent's split files (`sources.N.path`) and, for against_parents, every
 * earlier version's (`parents.N`) into its scratch (a local job reads file:// ones in place), with the job's own
 * credentials, which read only its organization's datasets (jobs/storage-access.ts). The command makes output_dir
 * only when complete and the runner uploads it only on success; on bad input it uploads the issues file instead.
 * The runner also points work_dir (dedup buckets) into its scratch.
 */
async function runPreparation(deps: ActivityDeps, input: DatasetPreparationInput, parent: DatasetRow): Promise<{ report: PrepareReport; output: string }> {
  const wantsParents = input.request.operations.some((o) => 'against_parents' in o && o.against_parents);
  const earlier = wantsParents ? await earlierVersionFiles(deps, input, parent) : [];
  const job = preparationJobDefinition(input, splitUris(parent), earlier, await baseModelInput(deps, input.tokenizer), deps.config.trainer.threads);
  try {
    const { result, files } = await runJobToCompletion(deps, { job, resultSchema: PrepareReportSchema });
    return { report: result, output: files.outputUri('output_dir') };
  } catch (err) {
    // Exit code 2 from the command: it refused the data and wrote why; the job fails with those issues, not a
    // log tail. (The runner refusing its envelope exits 2 too, with no issues file: its own message stands.)
    if (err instanceof ApplicationFailure && err.type === FailureType.BadJobSpec) {
      const issues = await refusedWith(deps, job);
      if (issues) throw nonRetryable(FailureType.BadInput, new PrepareIssuesError(issues).message, { issues });
    }
    throw err;
  }
}

const splitUris = (row: DatasetRow): Record<SplitName, string> =>
  Object.fromEntries(SPLITS.map((s) => [s, (row.splits as Record<SplitName, { path: string }>)[s].path])) as Record<SplitName, string>;

/**
 * The prepare-dataset job of a derive: the parent's split files as its sources, the earlier versions' as its
 * parents, each an input field inside the spec (`sources.N.path`, `parents.N`) that the job runner fetches.
 */
export function preparationJobDefinition(input: DatasetPreparationInput, parentSplits: Record<SplitName, string>, earlier: string[], tokenizer: JobInput, threads: number): JobDefinition {
  const filledByRunner = 'set by the job runner';
  const spec: PrepareDatasetJobSpec = {
    kind: 'prepare-dataset',
    job_name: `dataset-prep-${input.dataset_id}`,
    ...parentSources({ train: filledByRunner, validation: filledByRunner, test: filledByRunner }),
    parents: earlier.map(() => filledByRunner),
    operations: input.request.operations,
    split: input.request.split,
    tokenizer_path: filledByRunner,
    output_dir: filledByRunner,
    report_path: filledByRunner,
    issues_path: filledByRunner,
    work_dir: filledByRunner,
    memory_budget_mb: 1024,
    max_errors: 20,
    threads,
  };
  return defineJob({
    name: `dataset-prep-${input.dataset_id}`,
    kind: 'prepare-dataset',
    organizationId: input.organization_id,
    tool: 'trainer',
    spec,
    inputs: {
      ...Object.fromEntries(SPLITS.map((s, i) => [`sources.${i}.path`, fileInput(parentSplits[s])])),
      ...Object.fromEntries(earlier.map((uri, i) => [`parents.${i}`, fileInput(uri)])),
      tokenizer_path: tokenizer,
    },
    outputs: { output_dir: 'dir', report_path: 'file', issues_path: 'file' },
    resultField: 'report_path',
  });
}

/** The issues prepare-dataset uploaded when it refused the data; null when it uploaded none. */
async function refusedWith(deps: ActivityDeps, job: JobDefinition): Promise<PrepareIssue[] | null> {
  const attempt = await currentAttempt(deps, job);
  const uri = `${attempt.envelopeUri.slice(0, attempt.envelopeUri.lastIndexOf('/'))}/outputs/issues_path`;
  if (!(await deps.store.exists(uri))) return null;
  const dir = await mkdtemp(join(tmpdir(), 'dataset-prep-issues-'));
  try {
    return await readIssues(await localPathFor(deps.store, uri, dir));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** dedup against_parents: the split files of the other, earlier versions of the derived dataset's name. */
async function earlierVersionFiles(deps: ActivityDeps, input: DatasetPreparationInput, parent: DatasetRow): Promise<string[]> {
  const rows = (await olderVersions(deps.db, input.organization_id, input.name, 16)).filter((r) => r.id !== parent.id && r.id !== input.dataset_id);
  return rows.flatMap((r) => SPLITS.map((s) => splitUris(r)[s]));
}
