// The chain behind one model version, read from the catalogue in one call: dataset version (and the versions it was
// derived from) -> pipeline and its jobs -> run -> checkpoints -> formats -> stage history. Everything is read
// within the version's organization, so another organization's version is simply not found.
import { and, asc, eq, inArray, like } from 'drizzle-orm';
import type { Db } from '../client.js';
import { auditLog, datasets, jobs, runArtifacts } from '../schema/index.js';
import { getVersion, type ModelVersionRow } from './models.js';
import { getPipelineRow } from './pipelines.js';
import { getRun, type RunRow } from './runs.js';
import { orderFormats } from '../../lib/model-artifacts.js';
import type { FormatArtifact, ModelLineage } from '../../contracts/models.js';

type DatasetRow = typeof datasets.$inferSelect;
/** The lineage as stored; the API names the run as MLflow does. */
export type StoredLineage = Omit<ModelLineage, 'run'> & { run: RunRow | null };

const datasetView = (d: DatasetRow) => ({ id: d.id, name: d.name, version: d.version, sha256: d.sha256, num_records: d.numRecords, created_at: d.createdAt.toISOString() });

/** Null when the organization has no such version. */
export async function modelVersionLineage(db: Db, organizationId: string, name: string, version: number): Promise<StoredLineage | null> {
  const found = await getVersion(db, organizationId, name, version);
  if (!found) return null;
  const v = found.version;
  const recorded = v.lineage as { run_id?: string; dataset_id?: string; pipeline_id?: string; job_id?: string };
  const runId = v.runId ?? recorded.run_id ?? null;
  const pipelineId = recorded.pipeline_id ?? v.sourcePipeline ?? null;
  const [dataset, pipeline, run, made] = await Promise.all([
    datasetWithParents(db, organizationId, v.datasetId ?? recorded.dataset_id ?? null),
    pipelineId ? getPipelineRow(db, organizationId, pipelineId) : null,
    runId ? getRun(db, organizationId, runId) : null,
    jobsOf(db, organizationId, pipelineId, recorded.job_id ?? null),
  ]);
  return {
    name,
    version: v.version,
    stage: v.stage,
    dataset,
    pipeline: pipeline ? { id: pipeline.id, stage: pipeline.stage, outcome: pipeline.outcome, created_at: pipeline.createdAt.toISOString() } : null,
    jobs: made,
    run,
    checkpoints: run ? await checkpointsOf(db, run.id) : [],
    formats: formatsOf(v),
    stages: await stageHistory(db, organizationId, name, v),
  };
}

async function datasetWithParents(db: Db, organizationId: string, id: string | null): Promise<ModelLineage['dataset']> {
  if (!id) return null;
  const [row] = await db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), eq(datasets.id, id)));
  if (!row) return null;
  const parentIds = (row.lineage as { parent_datasets?: string[] }).parent_datasets ?? [];
  const parents = parentIds.length
    ? await db.select().from(datasets).where(and(eq(datasets.organizationId, organizationId), inArray(datasets.id, parentIds))).orderBy(asc(datasets.version))
    : [];
  return { ...datasetView(row), parents: parents.map(datasetView) };
}

/** A pipeline's jobs (its stages, oldest first), or the one job that registered the version (a conversion). */
async function jobsOf(db: Db, organizationId: string, pipelineId: string | null, jobId: string | null): Promise<ModelLineage['jobs']> {
  const where = pipelineId ? eq(jobs.parent, `pipeline:${pipelineId}`) : jobId ? eq(jobs.id, jobId) : null;
  if (!where) return [];
  const rows = await db.select().from(jobs).where(and(eq(jobs.organizationId, organizationId), where)).orderBy(asc(jobs.seq));
  return rows.map((j) => ({ id: j.id, name: j.name, type: j.type, status: j.status, run_id: j.runId }));
}

/** The checkpoints the training recorded on the run (activities/training.ts recordCheckpoint), by step. */
async function checkpointsOf(db: Db, runId: string): Promise<ModelLineage['checkpoints']> {
  const rows = await db.select().from(runArtifacts).where(eq(runArtifacts.runId, runId)).orderBy(asc(runArtifacts.path));
  return rows
    .map((a) => ({ a, meta: a.metadata as { kind?: string; step?: number } }))
    .filter(({ meta }) => meta.kind === 'checkpoint' || meta.kind === 'best_checkpoint')
    .map(({ a, meta }) => ({ path: a.path, step: meta.step ?? null, kind: meta.kind!, sha256: a.sha256, size_bytes: a.sizeBytes }))
    .sort((x, y) => (x.step ?? 0) - (y.step ?? 0));
}

function formatsOf(v: ModelVersionRow): ModelLineage['formats'] {
  const artifacts = v.artifacts as Record<string, FormatArtifact>;
  return orderFormats(Object.keys(artifacts)).map((f) => ({ name: f, checksum: artifacts[f]!.checksum, size_bytes: artifacts[f]!.size_bytes, files: artifacts[f]!.files }));
}

/** Registered (the stage it was made in), then every stage change from the audit trail (transitionStage writes one each). */
async function stageHistory(db: Db, organizationId: string, name: string, v: ModelVersionRow): Promise<ModelLineage['stages']> {
  const rows = await db
    .select()
    .from(auditLog)
    .where(and(eq(auditLog.organizationId, organizationId), eq(auditLog.target, `${name}/${v.version}`), like(auditLog.action, 'model.stage.%')))
    .orderBy(asc(auditLog.createdAt));
  const changes = rows.map((r) => {
    const detail = JSON.parse(r.detail) as { from?: string; reason?: string };
    return { stage: r.action.slice('model.stage.'.length), from: detail.from ?? null, actor: r.actor, at: r.createdAt.toISOString(), reason: detail.reason ?? '' };
  });
  // The stage it was registered in is the first change's "from" (or the stage it is in, if it never moved).
  const registered = { stage: changes[0]?.from ?? v.stage, from: null, actor: v.createdBy, at: v.createdAt.toISOString(), reason: 'registered' };
  return [registered, ...changes];
}
