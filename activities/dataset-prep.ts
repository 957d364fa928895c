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
import { PrepareProgressSchema, PrepareReportSchema, type DatasetPreparationInput, type DatasetPreparationResult, type PrepareDatasetJobSpec, type PrepareProgress, type PrepareReport } from '../contracts/data-prep.js';
import { JOB_FILES } from '../contracts/job-io.js';
import type { JobFiles } from '../lib/job-files.js';
import { SPLITS, type SplitName } from '../contracts/datasets.js';
import { parentSources, preparationJob, readIssues, storePreparedVersion, transformSummary, PrepareIssuesError, type PrepareIssue } from '../datasets/derive.js';
import { recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { failDatasetVersion, getDataset, olderVersions, type DatasetRow } from '../db/repo/datasets.js';
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
      // An upload's version, still preparing (bad input has marked it failed with its issues already), ends failed.
      if (a.input.upload) await failDatasetVersion(deps.db, a.input.organization_id, a.input.dataset_id, [{ file: a.input.upload.display_name, record: null, field: null, expected: null, message: a.message }]);
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
  const job = preparationJobDefinition(input, parentSplitSources(splitUris(parent)), earlier, await baseModelInput(deps, input.tokenizer), deps.config.trainer.threads);
  return runPreparationJob(deps, job, undefined, (p) => setChildJobStatus(deps.db, input.job_id, 'running', readingMessage(p)).then(() => undefined));
}

/**
 * Runs a prepare-dataset job to its report and the URI of its output directory. Exit code 2 from the command: it
 * refused the data and wrote why; the job fails with those issues (after `onRefused` hears them), not a log tail.
 * (The runner refusing its envelope exits 2 too, with no issues file: its own message stands.)
 */
export async function runPreparationJob(
  deps: ActivityDeps,
  job: JobDefinition,
  onRefused: (issues: PrepareIssue[]) => Promise<void> = async () => undefined,
  onProgress: (p: PrepareProgress) => Promise<void> = async () => undefined,
): Promise<{ report: PrepareReport; output: string }> {
  let told = '';
  // Each poll (about a second) reads the progress.json the runner copies up; a change is told once.
  const onPoll = async (files: JobFiles): Promise<Record<string, unknown>> => {
    const p = await files.readJson(JOB_FILES.progress, PrepareProgressSchema);
    if (!p) return {};
    const now = `${p.records_read}/${p.bytes_read}`;
    if (now !== told) await onProgress(p);
    told = now;
    return { records_read: p.records_read };
  };
  try {
    const { result, files } = await runJobToCompletion(deps, { job, resultSchema: PrepareReportSchema, onPoll });
    return { report: result, output: files.outputUri('output_dir') };
  } catch (err) {
    if (err instanceof ApplicationFailure && err.type === FailureType.BadJobSpec) {
      const issues = await refusedWith(deps, job);
      if (issues) {
        await onRefused(issues);
        throw nonRetryable(FailureType.BadInput, new PrepareIssuesError(issues).message, { issues });
      }
    }
    throw err;
  }
}

/** What a preparation job is doing as its message says it: `reading: 120,000 records, 25% of 200.0 MB`. */
export function readingMessage(p: PrepareProgress): string {
  const records = `reading: ${p.records_read.toLocaleString('en-US')} records`;
  if (p.bytes_read === null || p.bytes_total === 0) return records;
  const percent = Math.min(100, Math.floor((100 * p.bytes_read) / p.bytes_total));
  return `${records}, ${percent}% of ${(p.bytes_total / 1e6).toFixed(1)} MB`;
}

const splitUris = (row: DatasetRow): Record<SplitName, string> =>
  Object.fromEntries(SPLITS.map((s) => [s, (row.splits as Record<SplitName, { path: string }>)[s].path])) as Record<SplitName, string>;

/** What a spec path the job runner fills in holds until then. */
export const FILLED_BY_RUNNER = 'set by the job runner';

/** A preparation's sources as the spec names them (paths FILLED_BY_RUNNER) and the object each one is fetched from. */
export interface PreparationSources {
  sources: PrepareDatasetJobSpec['sources'];
  split_of: PrepareDatasetJobSpec['split_of'];
  uris: string[];
}

/** A derive's sources: the parent version's three split files. */
export function parentSplitSources(parentSplits: Record<SplitName, string>): PreparationSources {
  return { ...parentSources({ train: FILLED_BY_RUNNER, validation: FILLED_BY_RUNNER, test: FILLED_BY_RUNNER }), uris: SPLITS.map((s) => parentSplits[s]) };
}

/**
 * The prepare-dataset job of a derive or an upload: its sources (a parent's split files, an upload's raw file)
 * and the earlier versions as its parents, each an input field inside the spec (`sources.N.path`, `parents.N`)
 * that the job runner fetches.
 */
export function preparationJobDefinition(input: DatasetPreparationInput, sources: PreparationSources, earlier: string[], tokenizer: JobInput, threads: number): JobDefinition {
  const spec: PrepareDatasetJobSpec = {
    kind: 'prepare-dataset',
    job_name: `dataset-prep-${input.dataset_id}`,
    sources: sources.sources,
    split_of: sources.split_of,
    parents: earlier.map(() => FILLED_BY_RUNNER),
    operations: input.request.operations,
    split: input.request.split,
    tokenizer_path: FILLED_BY_RUNNER,
    output_dir: FILLED_BY_RUNNER,
    report_path: FILLED_BY_RUNNER,
    issues_path: FILLED_BY_RUNNER,
    work_dir: FILLED_BY_RUNNER,
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
      ...Object.fromEntries(sources.uris.map((uri, i) => [`sources.${i}.path`, fileInput(uri)])),
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
