// A dataset version made by the trainer's `prepare-dataset` command (contracts/data-prep.ts): the job spec's
// parts, and the version row recorded from its report once the files are stored. Used by the derive job
// (activities/dataset-prep.ts) and by an upload's preparation job (activities/datasets.ts).
import { readFile } from 'node:fs/promises';
import {
  datasetPreparationWorkflowId,
  type DatasetPreparationInput,
  type DeriveRequest,
  type PrepOperation,
  type PrepSource,
  type PrepareReport,
} from '../contracts/data-prep.js';
import { SPLITS, type SplitName, type UploadFormat } from '../contracts/datasets.js';
import { PrepareIssueSchema } from '../contracts/data-prep.js';
import type { Db } from '../db/client.js';
import { completeDatasetVersion, insertDatasetVersion, type DatasetRow, type NewDataset } from '../db/repo/datasets.js';
import type { ObjectStore, StoredObject } from '../lib/object-store.js';
import type { Config } from '../contracts/config.js';
import { jobParent } from '../contracts/job-kinds.js';
import { deterministicUuid } from '../lib/ids.js';
import type { ChildJob } from '../db/repo/child-jobs.js';
import { z } from 'zod';

export type PrepareIssue = z.infer<typeof PrepareIssueSchema>;

/** Bad input found by prepare-dataset (its exit code 2): the issues it wrote, each naming file, record and field. */
export class PrepareIssuesError extends Error {
  constructor(readonly issues: PrepareIssue[]) {
    super(`the data was refused:\n${issues.map(describeIssue).join('\n')}`);
  }
}

export const describeIssue = (i: PrepareIssue): string =>
  `  ${i.file}${i.record !== null ? ` record ${i.record}` : ''}${i.field !== null ? ` field ${i.field}` : ''}: ${i.message}`;

/** Reads the issues file prepare-dataset writes on bad input; an unreadable one is one issue saying so. */
export async function readIssues(path: string): Promise<PrepareIssue[]> {
  const text = await readFile(path, 'utf8').catch(() => null);
  const parsed = text === null ? null : z.object({ issues: z.array(PrepareIssueSchema) }).safeParse(JSON.parse(text));
  if (parsed?.success && parsed.data.issues.length) return parsed.data.issues;
  return [{ file: path, record: null, field: null, message: 'prepare-dataset exited with "bad input" but wrote no readable issues' }];
}

/** A readable one-line account of the operations, for the version's lineage. */
export function transformSummary(parent: { name: string; version: number }, ops: PrepOperation[]): string {
  const params = (o: PrepOperation): string =>
    Object.entries(o)
      .filter(([k, v]) => k !== 'op' && v !== undefined)
      .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('|') : typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
      .join(' ');
  return `derive ${parent.name} v${parent.version}: ${ops.map((o) => `${o.op}(${params(o)})`).join(' -> ')}`;
}

/** The sources of a derive: the parent's three split files, each keeping its records in its split unless re-split. */
export function parentSources(localSplits: Record<SplitName, string>): { sources: PrepSource[]; split_of: Record<string, SplitName> } {
  const sources = SPLITS.map((s) => ({ path: localSplits[s], format: 'jsonl' as const, display_name: `${s}.jsonl`, text_unit: 'line' as const, text_field: 'text' }));
  return { sources, split_of: Object.fromEntries(SPLITS.map((s) => [`${s}.jsonl`, s])) };
}

export interface PreparedVersion {
  id: string;
  organizationId: string;
  createdBy: string;
  name: string;
  format: UploadFormat;
  tags: string[];
  transform: string;
  parentDatasets: string[];
  report: PrepareReport;
  tokenizer: string;
  extraMetadata?: Record<string, unknown>;
  audited?: (tx: Db, row: DatasetRow) => Promise<void>;
}

/** Where a version's files live in the datasets bucket. */
export const versionPrefix = (v: { organizationId: string; name: string; id: string }): string => `${v.organizationId}/${v.name}/${v.id}`;

/**
 * Records a version whose files are already stored: should recording fail, its files are removed, so that no
 * unreferenced half of a version lingers in the bucket (the caller's next attempt stores them again).
 */
export async function recordOrDeleteFiles(deps: { store: ObjectStore }, bucket: string, prefix: string, record: () => Promise<DatasetRow>): Promise<DatasetRow> {
  try {
    return await record();
  } catch (err) {
    await deps.store.deletePrefix(bucket, prefix).catch(() => undefined);
    throw err;
  }
}

/**
 * Copies the prepared files to the datasets bucket under the version's prefix, then inserts the row: a crash
 * before the insert leaves no version (the next attempt copies the same objects again), one after it leaves the
 * version whole. A failed insert removes the copied files.
 */
export async function storePreparedVersion(deps: { db: Db; store: ObjectStore; config: Config }, v: PreparedVersion, copy: (bucket: string, prefix: string) => Promise<StoredObject[]>): Promise<DatasetRow> {
  const bucket = deps.config.storage.buckets.datasets;
  const prefix = versionPrefix(v);
  const row = { id: v.id, organizationId: v.organizationId, name: v.name, createdBy: v.createdBy, ...preparedFields(v, prefix, await copy(bucket, prefix)) };
  return recordOrDeleteFiles(deps, bucket, prefix, () => insertDatasetVersion(deps.db, row, v.audited));
}

/**
 * An upload's preparing version made ready: the prepared files copied beside its raw file, then its row filled
 * in by one update (a crash before it leaves the version preparing, and the retried job copies the same objects
 * again). The raw file stays, so a failed update removes nothing.
 */
export async function completePreparedVersion(deps: { db: Db; store: ObjectStore; config: Config }, v: PreparedVersion, copy: (bucket: string, prefix: string) => Promise<StoredObject[]>): Promise<DatasetRow> {
  const bucket = deps.config.storage.buckets.datasets;
  const prefix = versionPrefix(v);
  return completeDatasetVersion(deps.db, v.organizationId, v.id, preparedFields(v, prefix, await copy(bucket, prefix)));
}

/** The row's fields a prepare-dataset report and its stored files give. */
function preparedFields(v: PreparedVersion, prefix: string, stored: StoredObject[]): Omit<NewDataset, 'id' | 'organizationId' | 'name' | 'createdBy'> {
  const uriOf = (relative: string): string => {
    const hit = stored.find((o) => o.uri.endsWith(`/${relative}`));
    if (!hit) throw new Error(`prepare-dataset reported ${relative}, which is not among its outputs`);
    return hit.uri;
  };
  const r = v.report;
  const split = (s: SplitName) => ({ path: uriOf(r.splits[s].path), num_records: r.splits[s].records, size_bytes: r.splits[s].size_bytes, sha256: r.splits[s].sha256, tokens: r.splits[s].tokens });
  return {
    format: v.format,
    storagePath: `${stored[0]!.uri.slice(0, stored[0]!.uri.indexOf(`/${prefix}/`))}/${prefix}/`,
    sizeBytes: SPLITS.reduce((n, s) => n + r.splits[s].size_bytes, 0),
    numRecords: r.records_out,
    sha256: r.sha256,
    schema: r.schema,
    splits: { train: split('train'), validation: split('validation'), test: split('test') },
    metadata: { ...v.extraMetadata, report: reportMetadata(r, v.tokenizer, uriOf) },
    tags: v.tags,
    lineage: { parent_datasets: v.parentDatasets, transform: v.transform, operations: r.operations.map((o) => ({ op: o.op, params: o.params, records_in: o.records_in, records_out: o.records_out, removed: o.removed, added: o.added, details: o.details })) },
  };
}

/** What the version's metadata keeps of the report: counts, PII redactions per kind, tokens per split, tokenized files. */
function reportMetadata(r: PrepareReport, tokenizer: string, uriOf: (relative: string) => string): Record<string, unknown> {
  const redactions: Record<string, number> = {};
  for (const o of r.operations.filter((o) => o.op === 'mask_pii')) {
    for (const [kind, n] of Object.entries((o.details.redactions ?? {}) as Record<string, number>)) redactions[kind] = (redactions[kind] ?? 0) + n;
  }
  return {
    records_in: r.records_in,
    records_out: r.records_out,
    pii_redactions: redactions,
    tokenizer,
    tokenizer_sha256: r.tokenizer_sha256,
    token_counts: Object.fromEntries(SPLITS.map((s) => [s, r.splits[s].tokens])),
    tokenized: r.tokenized
      ? { max_length: r.tokenized.max_length, splits: Object.fromEntries(Object.entries(r.tokenized.splits).map(([s, t]) => [s, { ...t, path: uriOf(t.path) }])) }
      : null,
    peak_rss_mb: r.peak_rss_mb,
    seconds: r.seconds,
  };
}


/** The name and tokenizer a derived version gets: the request's, else the parent's. */
export function deriveTarget(parent: DatasetRow, req: DeriveRequest): { name: string; tokenizer: string | null } {
  const meta = parent.metadata as { tokenizer?: string; report?: { tokenizer?: string } };
  return { name: req.name ?? parent.name, tokenizer: req.tokenizer ?? meta.report?.tokenizer ?? meta.tokenizer ?? null };
}

/**
 * The preparation of a raw file (an upload, a pipeline's source): prepare-dataset with exact dedup and the split,
 * filling in the version `id` that was recorded preparing. Its job id follows from the version's, so a retry
 * finds the same job.
 */
export function rawPreparationInput(r: {
  id: string;
  organizationId: string;
  requestedBy: string;
  name: string;
  tokenizer: string;
  split: { seed: number; train: number; validation: number; test: number };
  tags: string[];
  upload: NonNullable<DatasetPreparationInput['upload']>;
}): DatasetPreparationInput {
  return {
    organization_id: r.organizationId,
    requested_by: r.requestedBy,
    job_id: deterministicUuid(`dataset-preparation:${r.id}`),
    parent_id: r.id,
    dataset_id: r.id,
    name: r.name,
    tokenizer: r.tokenizer,
    request: { operations: [{ op: 'dedup_exact', against_parents: false }], split: r.split, tags: r.tags },
    upload: r.upload,
  };
}

/** The child job of a derive, as the API records it queued and the activity moves it. */
export function preparationJob(input: DatasetPreparationInput): ChildJob {
  return {
    id: input.job_id,
    organizationId: input.organization_id,
    parent: jobParent('dataset', input.parent_id),
    name: `${input.upload ? 'prepare' : 'derive'}-${input.name}`.slice(0, 63),
    submittedBy: input.requested_by,
    type: 'data_preparation',
    workflowId: datasetPreparationWorkflowId(input.dataset_id),
    runId: null,
    spec: { parent_id: input.parent_id, dataset_id: input.dataset_id, ...input.request },
  };
}
