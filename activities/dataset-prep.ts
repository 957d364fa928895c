// The derive job: the trainer's prepare-dataset command through the job executor, on the parent version's split
// files, then the new version stored and recorded (datasets/derive.ts). The job is a child job of the parent
// dataset (`dataset:<parent id>`, type data_preparation) in GET /v1/jobs. A retry finds the version recorded by
// an earlier attempt (its id is chosen by the API), so one derive makes at most one version.
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from './deps.js';
import { runJobToCompletion } from './run-job.js';
import { baseModelInput } from '../jobs/inputs.js';
import { defineJob } from '../jobs/definition.js';
import { FailureType, nonRetryable } from '../contracts/failures.js';
import { PrepareReportSchema, type DatasetPreparationInput, type DatasetPreparationResult, type PrepareDatasetJobSpec, type PrepareReport } from '../contracts/data-prep.js';
import { SPLITS, type SplitName } from '../contracts/datasets.js';
import { parentSources, preparationJob, readIssues, storePreparedVersion, transformSummary, PrepareIssuesError } from '../datasets/derive.js';
import { recordChildJob, setChildJobStatus } from '../db/repo/child-jobs.js';
import { failDatasetVersion, getDataset, olderVersions, type DatasetRow } from '../db/repo/datasets.js';
import { localPathFor } from '../lib/object-store.js';

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
        (bucket, prefix) => deps.store.putDirectory(bucket, prefix, report.outputDir),
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
 * The prepare-dataset job. Its sources and parents are lists of paths, which the job runner does not fetch (it
 * fills top-level fields only), so they are local paths: the job runs on this worker's machine (the local
 * executor), reading file:// splits in place and s3:// ones fetched here first. Its output_dir and issues file
 * are local too: the command makes output_dir itself, only when complete (the runner would make an output field's
 * directory first), and the runner uploads outputs only when the command succeeds.
 */
async function runPreparation(deps: ActivityDeps, input: DatasetPreparationInput, parent: DatasetRow): Promise<{ report: PrepareReport; outputDir: string }> {
  if (deps.executor.kind !== 'local')
    throw nonRetryable(
      FailureType.NotConfigured,
      `dataset preparation runs on the local executor only (scheduler.executor is ${deps.executor.kind}): its inputs are lists of files the job runner does not fetch`,
    );
  const work = join(deps.home, 'work', `dataset-prep-${input.dataset_id}`);
  await mkdir(join(work, 'scratch'), { recursive: true });
  const splits = parent.splits as Record<SplitName, { path: string }>;
  const local = Object.fromEntries(await Promise.all(SPLITS.map(async (s) => [s, await localPathFor(deps.store, splits[s].path, join(work, 'parent'))] as const))) as Record<SplitName, string>;
  const wantsParents = input.request.operations.some((o) => 'against_parents' in o && o.against_parents);
  const parents = wantsParents ? await earlierVersionFiles(deps, input, parent, join(work, 'earlier')) : [];
  const issuesPath = join(work, 'issues.json');
  const outputDir = join(work, 'output');
  const spec: PrepareDatasetJobSpec = {
    kind: 'prepare-dataset',
    job_name: `dataset-prep-${input.dataset_id}`,
    ...parentSources(local),
    parents,
    operations: input.request.operations,
    split: input.request.split,
    tokenizer_path: 'input:tokenizer_path',
    output_dir: outputDir,
    report_path: 'output:report_path',
    issues_path: issuesPath,
    work_dir: join(work, 'scratch'),
    memory_budget_mb: 1024,
    max_errors: 20,
    threads: deps.config.trainer.threads,
  };
  try {
    const { result } = await runJobToCompletion(deps, {
      job: defineJob({
        name: `dataset-prep-${input.dataset_id}`,
        kind: 'prepare-dataset',
        organizationId: input.organization_id,
        tool: 'trainer',
        spec,
        inputs: { tokenizer_path: await baseModelInput(deps, input.tokenizer) },
        outputs: { report_path: 'file' },
        resultField: 'report_path',
      }),
      resultSchema: PrepareReportSchema,
    });
    return { report: result, outputDir };
  } catch (err) {
    // Exit code 2: the command refused the data and wrote why; the job fails with those issues, not a log tail.
    if (err instanceof ApplicationFailure && err.type === FailureType.BadJobSpec) {
      const issues = await readIssues(issuesPath);
      throw nonRetryable(FailureType.BadInput, new PrepareIssuesError(issues).message, { issues });
    }
    throw err;
  }
}

/** dedup against_parents: the split files of the other, earlier versions of the derived dataset's name. */
async function earlierVersionFiles(deps: ActivityDeps, input: DatasetPreparationInput, parent: DatasetRow, dir: string): Promise<string[]> {
  const rows = (await olderVersions(deps.db, input.organization_id, input.name, 16)).filter((r) => r.id !== parent.id && r.id !== input.dataset_id);
  const paths: string[] = [];
  for (const r of rows) {
    const splits = r.splits as Record<SplitName, { path: string }>;
    for (const s of SPLITS) paths.push(await localPathFor(deps.store, splits[s].path, dir));
  }
  return paths;
}
