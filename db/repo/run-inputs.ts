// What a run used and produced, as MLflow 3 records it: dataset inputs with their tags (log-inputs), model
// inputs and outputs (log-inputs, outputs), and the per-experiment dataset summaries the UI lists.
import { randomUUID } from 'node:crypto';
import { and, asc, eq, inArray, sql } from 'drizzle-orm';
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

/** Dataset inputs and model inputs/outputs of several runs in two queries. */
export async function runIoOf(db: Db, runIds: string[]): Promise<Map<string, RunIo>> {
  const out = new Map<string, RunIo>(runIds.map((id) => [id, { datasets: [], modelInputs: [], modelOutputs: [] }]));
  if (runIds.length === 0) return out;
  const [inputs, models] = await Promise.all([
    db
      .select({ runId: runDatasetInputs.runId, tags: runDatasetInputs.tags, d: mlflowDatasets })
      .from(runDatasetInputs)
      .innerJoin(mlflowDatasets, eq(mlflowDatasets.id, runDatasetInputs.datasetId))
      .where(inArray(runDatasetInputs.runId, runIds))
      .orderBy(asc(runDatasetInputs.createdAt), asc(mlflowDatasets.name)),
    db.select().from(runModels).where(inArray(runModels.runId, runIds)).orderBy(asc(runModels.modelId)),
  ]);
  for (const i of inputs)
    out.get(i.runId)!.datasets.push({
      tags: [...i.tags].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
      dataset: { name: i.d.name, digest: i.d.digest, source_type: i.d.sourceType, source: i.d.source, ...(i.d.schema !== null ? { schema: i.d.schema } : {}), ...(i.d.profile !== null ? { profile: i.d.profile } : {}) },
    });
  for (const m of models) {
    const io = out.get(m.runId)!;
    if (m.direction === 'input') io.modelInputs.push({ model_id: m.modelId });
    else io.modelOutputs.push({ model_id: m.modelId, step: m.step });
  }
  return out;
}
