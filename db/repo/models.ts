import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { modelVersions, registeredModels } from '../schema/index.js';
import { emitEvent } from './outbox.js';
import { audit } from './auth.js';

export type ModelVersionRow = typeof modelVersions.$inferSelect;
export type ModelStage = ModelVersionRow['stage'];
export type NewModelVersion = Omit<typeof modelVersions.$inferInsert, 'id' | 'modelId' | 'version' | 'createdAt' | 'stageChangedAt'> & {
  modelName: string;
};

async function ensureModel(tx: Parameters<Parameters<Db['transaction']>[0]>[0], organizationId: string, name: string): Promise<string> {
  await tx.insert(registeredModels).values({ id: randomUUID(), organizationId, name }).onConflictDoNothing();
  const [row] = await tx
    .select({ id: registeredModels.id })
    .from(registeredModels)
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name)));
  return row!.id;
}

/** Registers a new version; a retried call from the same pipeline returns the version it already made. */
export async function registerModelVersion(db: Db, v: NewModelVersion): Promise<ModelVersionRow> {
  if (v.sourcePipeline) {
    const [existing] = await db.select().from(modelVersions).where(eq(modelVersions.sourcePipeline, v.sourcePipeline));
    if (existing) return existing;
  }
  return db.transaction(async (tx) => {
    const modelId = await ensureModel(tx, v.organizationId, v.modelName);
    // Serialise version numbering per model: the row lock makes concurrent registrations queue.
    await tx.execute(sql`select id from ${registeredModels} where id = ${modelId} for update`);
    const [{ next }] = (await tx
      .select({ next: sql<number>`coalesce(max(${modelVersions.version}), 0) + 1` })
      .from(modelVersions)
      .where(eq(modelVersions.modelId, modelId))) as [{ next: number }];
    const { modelName, ...rest } = v;
    const [row] = await tx
      .insert(modelVersions)
      .values({ ...rest, id: randomUUID(), modelId, version: Number(next) })
      .returning();
    await emitEvent(tx, v.organizationId, 'models', modelName, {
      event: 'model.registered',
      name: modelName,
      version: row!.version,
      run_id: v.runId,
      stage: row!.stage,
    });
    return row!;
  });
}

/**
 * Moves a version to a stage. Promoting to production archives the current production version in the same
 * transaction (the partial unique index guarantees one production version per model).
 */
export async function transitionStage(
  db: Db,
  p: { organizationId: string; modelName: string; version: number; stage: ModelStage; actor: string; reason: string },
): Promise<{ version: ModelVersionRow; archived: number[] }> {
  return db.transaction(async (tx) => {
    const [model] = await tx
      .select()
      .from(registeredModels)
      .where(and(eq(registeredModels.organizationId, p.organizationId), eq(registeredModels.name, p.modelName)));
    if (!model) throw new NotFoundError(`model "${p.modelName}" does not exist`);
    await tx.execute(sql`select id from ${registeredModels} where id = ${model.id} for update`);
    const archived: number[] = [];
    if (p.stage === 'production') {
      const demoted = await tx
        .update(modelVersions)
        .set({ stage: 'archived', stageChangedAt: new Date() })
        .where(and(eq(modelVersions.modelId, model.id), eq(modelVersions.stage, 'production'), sql`${modelVersions.version} <> ${p.version}`))
        .returning({ version: modelVersions.version });
      archived.push(...demoted.map((d) => d.version));
    }
    const [row] = await tx
      .update(modelVersions)
      .set({ stage: p.stage, stageChangedAt: new Date() })
      .where(and(eq(modelVersions.modelId, model.id), eq(modelVersions.version, p.version)))
      .returning();
    if (!row) throw new NotFoundError(`model "${p.modelName}" has no version ${p.version}`);
    await emitEvent(tx, p.organizationId, 'models', p.modelName, {
      event: 'model.promoted',
      name: p.modelName,
      version: p.version,
      stage: p.stage,
      archived,
    });
    await audit(tx, {
      organizationId: p.organizationId,
      actor: p.actor,
      action: `model.stage.${p.stage}`,
      target: `${p.modelName}/${p.version}`,
      detail: { reason: p.reason, archived },
    });
    return { version: row, archived };
  });
}

export class NotFoundError extends Error {}

export async function listModels(db: Db, organizationId: string): Promise<{ name: string; latest_version: number | null; production_version: number | null; created_at: string }[]> {
  const models = await db.select().from(registeredModels).where(eq(registeredModels.organizationId, organizationId)).orderBy(asc(registeredModels.name));
  const out = [];
  for (const m of models) {
    const versions = await db
      .select({ version: modelVersions.version, stage: modelVersions.stage })
      .from(modelVersions)
      .where(eq(modelVersions.modelId, m.id))
      .orderBy(desc(modelVersions.version));
    out.push({
      name: m.name,
      latest_version: versions[0]?.version ?? null,
      production_version: versions.find((v) => v.stage === 'production')?.version ?? null,
      created_at: m.createdAt.toISOString(),
    });
  }
  return out;
}

export async function listVersions(db: Db, organizationId: string, name: string): Promise<ModelVersionRow[] | null> {
  const [model] = await db
    .select()
    .from(registeredModels)
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name)));
  if (!model) return null;
  return db.select().from(modelVersions).where(eq(modelVersions.modelId, model.id)).orderBy(desc(modelVersions.version));
}

export function modelVersionView(name: string, v: ModelVersionRow): Record<string, unknown> {
  return {
    name,
    version: v.version,
    stage: v.stage,
    run_id: v.runId,
    dataset_id: v.datasetId,
    architecture: v.architecture,
    base_model: v.baseModel,
    method: v.method,
    artifacts: v.artifacts,
    metrics: v.metrics,
    training_config: v.trainingConfig,
    lineage: v.lineage,
    tags: v.tags,
    created_at: v.createdAt.toISOString(),
    created_by: v.createdBy,
    stage_changed_at: v.stageChangedAt.toISOString(),
  };
}
