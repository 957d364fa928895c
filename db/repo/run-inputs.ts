// What a run used and produced, as MLflow 3 records it: dataset inputs with their tags (log-inputs), model
// inputs and outputs (log-inputs, outputs), and the per-experiment dataset summaries the UI lists.
import { randomUUID } from 'node:crypto';
import { and, eq, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { experiments, mlflowDatasets, runDatasetInputs, runModels } from '../schema/index.js';
import type { KeyValue } from './common.js';

export interface DatasetInput {
  tags: KeyValue[];
  dataset: { name: string; digest: string; source_type: string; source: string; schema?: string | undefined; profile?: string | undefined };
}

/**
 * Records datasets a run used. A dataset is stored once per experiment by (name, digest) and an input once per
 * run, keeping the first occurrence, so a replayed request changes nothing.
 */
export async function logDatasetInputs(db: Db, experimentId: string, runId: string, inputs: DatasetInput[]): Promise<void> {
  const firsts = [...new Map(inputs.map((i) => [`${i.dataset.name}\u0000${i.dataset.digest}`, i])).values()];
  if (firsts.length === 0) return;
  await db.transaction(async (tx) => {
    for (const input of firsts) {
      const d = input.dataset;
      await tx
        .insert(mlflowDatasets)
        .values({ id: randomUUID().replace(/-/g, ''), experimentId, name: d.name, digest: d.digest, sourceType: d.source_type, source: d.source, schema: d.schema ?? null, profile: d.profile ?? null })
        .onConflictDoNothing();
      const [stored] = await tx
        .select({ id: mlflowDatasets.id })
        .from(mlflowDatasets)
        .where(and(eq(mlflowDatasets.experimentId, experimentId), eq(mlflowDatasets.name, d.name), eq(mlflowDatasets.digest, d.digest)));
      await tx.insert(runDatasetInputs).values({ runId, datasetId: stored!.id, tags: input.tags }).onConflictDoNothing();
    }
  });
}

export async function logRunModels(db: Db, runId: string, direction: 'input' | 'output', models: { model_id: string; step?: number }[]): Promise<void> {
  if (models.length === 0) return;
  const rows = [...new Map(models.map((m) => [m.model_id, { runId, modelId: m.model_id, direction, step: m.step ?? 0 }])).values()];
  await db.insert(runModels).values(rows).onConflictDoNothing();
}

export interface DatasetSummary {
  experimentId: string;
  name: string;
  digest: string;
  context: string | null;
}

/**
 * The distinct (experiment, name, digest, `mlflow.data.context` tag) of the datasets runs used in these experiments
 * of the organization, at most 1000 (MLflow's limit); an input without a context tag has a null context.
 */
export async function datasetSummaries(db: Db, organizationId: string, experimentIds: string[]): Promise<DatasetSummary[]> {
  const result = await db.execute(sql`
    select distinct d.experiment_id, d.name, d.digest, ctx.value as context
    from ${mlflowDatasets} d
    join ${experiments} e on e.id = d.experiment_id and e.organization_id = ${organizationId}
    join ${runDatasetInputs} i on i.dataset_id = d.id
    left join lateral (select t ->> 'value' as value from jsonb_array_elements(i.tags) t where t ->> 'key' = 'mlflow.data.context') ctx on true
    where d.experiment_id in (${sql.join(
      experimentIds.map((id) => sql`${id}`),
      sql`, `,
    )})
    order by d.experiment_id, d.name, d.digest, context
    limit 1000`);
  return (result as unknown as { rows: { experiment_id: string; name: string; digest: string; context: string | null }[] }).rows.map((r) => ({
    experimentId: r.experiment_id,
    name: r.name,
    digest: r.digest,
    context: r.context,
  }));
}

export interface RunIo {
  datasets: DatasetInput[];
  modelInputs: { model_id: string }[];
  modelOutputs: { model_id: string; step: number }[];
}

/**
 * A run-data row (db/repo/runs.ts runDataOf): one statement reads a page of runs' params, tags, latest metrics,
 * dataset inputs and model inputs/outputs as one row set, ordered by (kind, ord).
 */
export interface RunDataRow {
  kind: 'p' | 't' | 'm' | 'd' | 'o';
  run_id: string;
  key: string;
  value: string;
  ts: string | null;
  step: string | null;
  is_nan: boolean;
}

/**
 * The dataset inputs ('d': the dataset and the input's tags as JSON in `value`, in the order they were logged)
 * and model inputs/outputs ('o': model id, direction, step) of the runs, as run-data rows.
 */
export function runIoRows(runIds: SQL): SQL {
  return sql`
    select 'd' as kind, i.run_id, d.name as key,
      json_build_object('tags', i.tags, 'name', d.name, 'digest', d.digest, 'source_type', d.source_type, 'source', d.source, 'schema', d.schema, 'profile', d.profile)::text as value,
      null as ts, null as step, false as is_nan,
      to_char(i.created_at at time zone 'UTC', 'YYYYMMDDHH24MISSUS') || d.name as ord
    from ${runDatasetInputs} i join ${mlflowDatasets} d on d.id = i.dataset_id where i.run_id = ${runIds}
    union all
    select 'o', run_id, model_id, direction, null, step::text, false, model_id from ${runModels} where run_id = ${runIds}`;
}

const emptyIo = (): RunIo => ({ datasets: [], modelInputs: [], modelOutputs: [] });

/** Adds a 'd' or 'o' run-data row to its run's inputs and outputs. */
export function addRunIoRow(io: Map<string, RunIo>, r: RunDataRow): void {
  const run = io.get(r.run_id) ?? io.set(r.run_id, emptyIo()).get(r.run_id)!;
  if (r.kind === 'o') {
    if (r.value === 'input') run.modelInputs.push({ model_id: r.key });
    else run.modelOutputs.push({ model_id: r.key, step: Number(r.step) });
    return;
  }
  const d = JSON.parse(r.value) as { tags: KeyValue[]; name: string; digest: string; source_type: string; source: string; schema: string | null; profile: string | null };
  run.datasets.push({
    tags: [...d.tags].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
    dataset: { name: d.name, digest: d.digest, source_type: d.source_type, source: d.source, ...(d.schema !== null ? { schema: d.schema } : {}), ...(d.profile !== null ? { profile: d.profile } : {}) },
  });
}

/** Empty inputs and outputs for each run, to fill with addRunIoRow. */
export const runIoMap = (runIds: string[]): Map<string, RunIo> => new Map(runIds.map((id) => [id, emptyIo()]));
