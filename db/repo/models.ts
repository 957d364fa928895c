// The model registry: registered models (tags, aliases), their numbered versions and stages. Every function
// takes the caller's organization and never touches another organization's rows.
import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, inArray, ne, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../client.js';
import { modelAliases, modelVersions, registeredModels } from '../schema/index.js';
import { emitEvent, type Tx } from './outbox.js';
import { audit } from './auth.js';
import { orderFormats } from '../../lib/model-artifacts.js';
import { GATE_OVERRIDE_TAG, GATE_TAGS, GateDecisionSchema, QUARANTINE_OVERRIDE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_TAG } from '../../contracts/eval-suite.js';

export type RegisteredModelRow = typeof registeredModels.$inferSelect;
export type ModelVersionRow = typeof modelVersions.$inferSelect;
export type ModelStage = ModelVersionRow['stage'];
export type NewModelVersion = Omit<
  typeof modelVersions.$inferInsert,
  'id' | 'modelId' | 'version' | 'createdAt' | 'stageChangedAt' | 'lastUpdatedAt' | 'stage'
> & {
  modelName: string;
  stage?: ModelStage;
};

export class NotFoundError extends Error {}
/** A stage change that would leave two production versions of one model. */
export class StageConflictError extends Error {}
/** A version that may not move toward serving (staging or production) as it is. */
export class NotServableError extends Error {}
/** A version the promotion gate quarantined, moved toward serving without an override. */
export class QuarantinedError extends NotServableError {}

/** Files still being copied, or a registration that failed: nothing complete to serve. No override exists. */
function checkRegistered(target: ModelVersionRow, p: { modelName: string; stage: ModelStage }): void {
  if (target.status === 'ready' || (p.stage !== 'staging' && p.stage !== 'production')) return;
  throw new NotServableError(`version ${target.version} of model "${p.modelName}" is ${target.status === 'pending_registration' ? 'still being registered' : `not servable (${target.status})`}; it cannot move to ${p.stage}`);
}

/** Refuses staging/production for a quarantined version unless overridden; records the override on it. */
function checkQuarantine(target: ModelVersionRow, p: { modelName: string; stage: ModelStage; quarantineOverride?: string }): Record<string, string> | null {
  const tags = target.tags as Record<string, string>;
  if (tags[QUARANTINE_TAG] !== 'true' || (p.stage !== 'staging' && p.stage !== 'production')) return null;
  if (!p.quarantineOverride)
    throw new QuarantinedError(
      `version ${target.version} of model "${p.modelName}" is quarantined by the promotion gate (${tags[QUARANTINE_REASON_TAG] ?? 'no reason recorded'}); ` +
        `moving it to ${p.stage} takes an admin with an override reason`,
    );
  return { ...tags, [QUARANTINE_OVERRIDE_TAG]: p.quarantineOverride };
}

/** A version that never met an eval suite, moved to production without an override. */
export class UngatedError extends NotServableError {}

/**
 * Whether a version never met an eval suite: no gate decision of record (a pipeline's, or `model evaluate`'s, in
 * metrics.gate: hand-registered and converted versions have none) and no admin override. A blocked or inconclusive
 * decision is a decision: the quarantine and the inconclusive tag speak for those.
 */
export function isUngated(v: Pick<ModelVersionRow, 'metrics' | 'tags'>): boolean {
  if ((v.tags as Record<string, string>)[GATE_OVERRIDE_TAG]) return false;
  return !GateDecisionSchema.safeParse((v.metrics as Record<string, unknown>).gate).success;
}

/** The refusal of an ungated version's move to production, naming both ways out. */
export function ungatedMessage(modelName: string, version: number): string {
  return (
    `version ${version} of model "${modelName}" is ungated: it never met an eval suite (no gate decision is recorded on it), so it may go to staging but not to production. ` +
    `Either evaluate it (\`hanzo-ml model evaluate ${modelName} --version ${version}\`, POST /v1/models/${encodeURIComponent(modelName)}/versions/${version}/evaluate) ` +
    `and promote it once the gate passes, or have an admin override with a reason (\`hanzo-ml model promote ${modelName} ${version} --stage production --override-reason "..."\`, ` +
    `override_reason on PATCH .../stage, or a comment on MLflow's transition-stage)`
  );
}

/**
 * Refuses production for an ungated version when the registry requires the gate (registry.require_gate_for_production);
 * an admin's override reason, given on a move to staging or production, is recorded on it instead.
 */
function checkGate(target: ModelVersionRow, p: { modelName: string; stage: ModelStage; requireGate?: boolean; quarantineOverride?: string }): Record<string, string> | null {
  if (!isUngated(target) || (p.stage !== 'staging' && p.stage !== 'production')) return null;
  if (p.quarantineOverride) return { [GATE_OVERRIDE_TAG]: p.quarantineOverride };
  if (p.stage === 'production' && p.requireGate !== false) throw new UngatedError(ungatedMessage(p.modelName, target.version));
  return null;
}

/** A comparison of a registry search filter (the MLflow grammar, parsed by the API). */
export interface RegistryComparison {
  entity: 'tag' | 'attribute' | 'metric' | 'param';
  key: string;
  op: '=' | '!=' | '<' | '<=' | '>' | '>=' | 'LIKE' | 'ILIKE' | 'IN' | 'NOT IN' | 'IS NULL' | 'IS NOT NULL';
  value: string | number | string[];
}
export interface RegistryOrder {
  column: 'name' | 'version' | 'created' | 'updated';
  ascending: boolean;
}

const epochMs = (col: SQL): SQL => sql`(extract(epoch from ${col}) * 1000)::bigint`;

function compare(left: SQL, c: RegistryComparison): SQL {
  // Tags live in a jsonb column, so an absent tag reads as null.
  if (c.op === 'IS NULL' || c.op === 'IS NOT NULL') return sql`${left} ${sql.raw(c.op)}`;
  if (c.op === 'IN' || c.op === 'NOT IN') {
    const list = sql.join((c.value as string[]).map((v) => sql`${v}`), sql`, `);
    return sql`${left} ${sql.raw(c.op)} (${list})`;
  }
  return sql`${left} ${sql.raw(c.op)} ${c.value}`;
}

async function lockModel(tx: Tx, modelId: string): Promise<void> {
  await tx.execute(sql`select id from ${registeredModels} where id = ${modelId} for update`);
}

// ---- registered models ----

export async function getModel(db: Tx, organizationId: string, name: string): Promise<RegisteredModelRow | null> {
  const [row] = await db
    .select()
    .from(registeredModels)
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name)));
  return row ?? null;
}

/** Creates a registered model; null when the name is taken in the organization. */
export async function createModel(
  db: Db,
  p: { organizationId: string; name: string; description?: string; tags?: Record<string, string>; actor: string },
): Promise<RegisteredModelRow | null> {
  return db.transaction(async (tx) => {
    const [row] = await tx
      .insert(registeredModels)
      .values({ id: randomUUID(), organizationId: p.organizationId, name: p.name, description: p.description ?? '', tags: p.tags ?? {} })
      .onConflictDoNothing()
      .returning();
    if (!row) return null;
    await audit(tx, { organizationId: p.organizationId, actor: p.actor, action: 'model.create', target: p.name });
    return row;
  });
}

/** Renames a model; 'missing' when it does not exist, 'taken' when the new name is. */
export async function renameModel(db: Db, organizationId: string, name: string, newName: string, actor: string): Promise<RegisteredModelRow | 'missing' | 'taken'> {
  return db.transaction(async (tx) => {
    const model = await getModel(tx, organizationId, name);
    if (!model) return 'missing';
    if (name !== newName && (await getModel(tx, organizationId, newName))) return 'taken';
    const [row] = await tx.update(registeredModels).set({ name: newName, lastUpdatedAt: new Date() }).where(eq(registeredModels.id, model.id)).returning();
    await tx.update(modelVersions).set({ lastUpdatedAt: new Date() }).where(eq(modelVersions.modelId, model.id));
    await audit(tx, { organizationId, actor, action: 'model.rename', target: name, detail: { new_name: newName } });
    return row!;
  });
}

export async function updateModelDescription(db: Db, organizationId: string, name: string, description: string): Promise<RegisteredModelRow | null> {
  const [row] = await db
    .update(registeredModels)
    .set({ description, lastUpdatedAt: new Date() })
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name)))
    .returning();
  return row ?? null;
}

/** Deletes a model with its versions and aliases; false when it does not exist. */
export async function deleteModel(db: Db, organizationId: string, name: string, actor: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const model = await getModel(tx, organizationId, name);
    if (!model) return false;
    await lockModel(tx, model.id);
    await tx.delete(modelAliases).where(eq(modelAliases.modelId, model.id));
    const versions = await tx.delete(modelVersions).where(eq(modelVersions.modelId, model.id)).returning({ version: modelVersions.version });
    await tx.delete(registeredModels).where(eq(registeredModels.id, model.id));
    await audit(tx, { organizationId, actor, action: 'model.delete', target: name, detail: { versions: versions.map((v) => v.version).sort((a, b) => a - b) } });
    return true;
  });
}

/** Sets (or with value null removes) one tag atomically; false when the model does not exist. */
export async function setModelTag(db: Db, organizationId: string, name: string, key: string, value: string | null): Promise<boolean> {
  const tags = value === null ? sql`${registeredModels.tags} - ${key}::text` : sql`${registeredModels.tags} || jsonb_build_object(${key}::text, ${value}::text)`;
  const rows = await db
    .update(registeredModels)
    .set({ tags, lastUpdatedAt: new Date() })
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name)))
    .returning({ id: registeredModels.id });
  return rows.length > 0;
}

function modelCondition(c: RegistryComparison): SQL {
  if (c.entity === 'tag') return compare(sql`(${registeredModels.tags} ->> ${c.key}::text)`, c);
  return compare(sql`${registeredModels.name}`, c);
}

const MODEL_ORDER: Record<RegistryOrder['column'], SQL> = {
  name: sql`${registeredModels.name}`,
  version: sql`${registeredModels.lastVersion}`,
  created: sql`${registeredModels.createdAt}`,
  updated: epochMs(sql`${registeredModels.lastUpdatedAt}`),
};

/** One page of registered models; prompts (MLflow's prompt registry rows) are left out unless asked for. */
export async function searchModels(
  db: Db,
  organizationId: string,
  q: { filter: RegistryComparison[]; orderBy: RegistryOrder[]; offset: number; limit: number },
): Promise<{ rows: RegisteredModelRow[]; more: boolean }> {
  const order = q.orderBy.map((o) => sql`${MODEL_ORDER[o.column]} ${sql.raw(o.ascending ? 'asc' : 'desc')}`);
  if (!q.orderBy.some((o) => o.column === 'name')) order.push(sql`${registeredModels.name} asc`);
  const rows = await db
    .select()
    .from(registeredModels)
    .where(and(eq(registeredModels.organizationId, organizationId), ...withoutPrompts(q.filter, sql`${registeredModels.tags}`, modelCondition)))
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

/**
 * MLflow keeps prompts in the registry, marked by a tag, and searches leave them out unless the filter asks for
 * them (`tags.\`mlflow.prompt.is_prompt\` = 'true'`); any other condition on that tag is dropped.
 */
function withoutPrompts(filter: RegistryComparison[], tags: SQL, condition: (c: RegistryComparison) => SQL): SQL[] {
  const onPromptTag = (c: RegistryComparison) => c.entity === 'tag' && c.key === PROMPT_TAG;
  const asksForPrompts = filter.some(
    (c) => onPromptTag(c) && typeof c.value === 'string' && ((c.op === '=' && c.value.toLowerCase() === 'true') || (c.op === '!=' && c.value.toLowerCase() === 'false')),
  );
  if (asksForPrompts) return filter.map(condition);
  return [sql`(${tags} ->> ${PROMPT_TAG}::text) is distinct from 'true'`, ...filter.filter((c) => !onPromptTag(c)).map(condition)];
}
const PROMPT_TAG = 'mlflow.prompt.is_prompt';

/** The newest version in each stage, per model. */
export async function latestVersionsPerStage(db: Tx, modelIds: string[]): Promise<Map<string, ModelVersionRow[]>> {
  const out = new Map<string, ModelVersionRow[]>(modelIds.map((id) => [id, []]));
  if (modelIds.length === 0) return out;
  const rows = await db
    .selectDistinctOn([modelVersions.modelId, modelVersions.stage])
    .from(modelVersions)
    .where(inArray(modelVersions.modelId, modelIds))
    .orderBy(modelVersions.modelId, modelVersions.stage, desc(modelVersions.version));
  for (const r of rows) out.get(r.modelId)!.push(r);
  for (const list of out.values()) list.sort((a, b) => a.version - b.version);
  return out;
}

export async function aliasesOf(db: Tx, modelIds: string[]): Promise<Map<string, { alias: string; version: number }[]>> {
  const out = new Map<string, { alias: string; version: number }[]>(modelIds.map((id) => [id, []]));
  if (modelIds.length === 0) return out;
  const rows = await db.select().from(modelAliases).where(inArray(modelAliases.modelId, modelIds)).orderBy(asc(modelAliases.alias));
  for (const r of rows) out.get(r.modelId)!.push({ alias: r.alias, version: r.version });
  return out;
}

// ---- versions ----

/**
 * Registers a new version, creating the model if needed. Numbers are never reused, even after a delete. A retried
 * call from the same pipeline returns the version it already made.
 */
export async function registerModelVersion(db: Db, v: NewModelVersion): Promise<ModelVersionRow> {
  if (v.sourcePipeline) {
    const [existing] = await db.select().from(modelVersions).where(eq(modelVersions.sourcePipeline, v.sourcePipeline));
    if (existing) return existing;
  }
  return db.transaction(async (tx) => {
    await tx.insert(registeredModels).values({ id: randomUUID(), organizationId: v.organizationId, name: v.modelName }).onConflictDoNothing();
    const model = (await getModel(tx, v.organizationId, v.modelName))!;
    // Serialise version numbering per model: the row lock makes concurrent registrations queue.
    await lockModel(tx, model.id);
    const [{ next }] = (await tx
      .select({ next: sql<number>`greatest(coalesce(max(${modelVersions.version}), 0), ${model.lastVersion}) + 1` })
      .from(modelVersions)
      .where(eq(modelVersions.modelId, model.id))) as [{ next: number }];
    const version = Number(next);
    await tx.update(registeredModels).set({ lastVersion: version, lastUpdatedAt: new Date() }).where(eq(registeredModels.id, model.id));
    const { modelName, ...rest } = v;
    const [row] = await tx
      .insert(modelVersions)
      .values({ ...rest, stage: v.stage ?? 'none', id: randomUUID(), modelId: model.id, version })
      .returning();
    await emitEvent(tx, v.organizationId, 'models', modelName, {
      event: 'model.registered',
      name: modelName,
      version,
      run_id: v.runId ?? null,
      stage: row!.stage,
    });
    return row!;
  });
}

/**
 * Records a version's copied artifacts and marks it ready (or, with `failed`, failed_registration with its
 * message). The columns describing the model (architecture, base model, method) come from the artifacts; null leaves
 * them (and source) as they are. Only a pending version changes: null when the version is gone (deleted while
 * its files were copied) or no longer pending (another attempt finished it), so a late attempt overwrites nothing.
 */
export async function completeRegistration(
  db: Db,
  id: string,
  p: {
    artifacts: Record<string, unknown>;
    checksum: string | null;
    source?: string | null;
    architecture?: string | null;
    baseModel?: string | null;
    method?: string | null;
    failed?: boolean;
    message?: string | null;
  },
): Promise<ModelVersionRow | null> {
  const described = Object.fromEntries(
    Object.entries({ source: p.source, architecture: p.architecture, baseModel: p.baseModel, method: p.method }).filter(([, v]) => v !== undefined && v !== null),
  );
  const [row] = await db
    .update(modelVersions)
    .set({
      artifacts: p.artifacts,
      checksum: p.checksum,
      status: p.failed ? 'failed_registration' : 'ready',
      statusMessage: p.failed ? (p.message ?? 'registration failed') : null,
      lastUpdatedAt: new Date(),
      ...described,
    })
    .where(and(eq(modelVersions.id, id), eq(modelVersions.status, 'pending_registration')))
    .returning();
  return row ?? null;
}

/** A version by its id, whatever its organization (the registration activity holds the id the API issued). */
export async function versionById(db: Tx, id: string): Promise<ModelVersionRow | null> {
  const [row] = await db.select().from(modelVersions).where(eq(modelVersions.id, id));
  return row ?? null;
}

export async function getVersion(db: Tx, organizationId: string, name: string, version: number): Promise<{ model: RegisteredModelRow; version: ModelVersionRow } | null> {
  const [row] = await db
    .select({ model: registeredModels, version: modelVersions })
    .from(modelVersions)
    .innerJoin(registeredModels, eq(registeredModels.id, modelVersions.modelId))
    .where(and(eq(registeredModels.organizationId, organizationId), eq(registeredModels.name, name), eq(modelVersions.version, version)));
  return row ?? null;
}

export async function updateVersionDescription(db: Db, organizationId: string, name: string, version: number, description: string): Promise<ModelVersionRow | null> {
  const found = await getVersion(db, organizationId, name, version);
  if (!found) return null;
  const [row] = await db.update(modelVersions).set({ description, lastUpdatedAt: new Date() }).where(eq(modelVersions.id, found.version.id)).returning();
  return row ?? null;
}

/** Deletes one version and the aliases pointing at it; false when it does not exist. */
export async function deleteVersion(db: Db, organizationId: string, name: string, version: number, actor: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const found = await getVersion(tx, organizationId, name, version);
    if (!found) return false;
    await lockModel(tx, found.model.id);
    await tx.delete(modelAliases).where(and(eq(modelAliases.modelId, found.model.id), eq(modelAliases.version, version)));
    await tx.delete(modelVersions).where(eq(modelVersions.id, found.version.id));
    await tx.update(registeredModels).set({ lastUpdatedAt: new Date() }).where(eq(registeredModels.id, found.model.id));
    await audit(tx, { organizationId, actor, action: 'model.version.delete', target: `${name}/${version}`, detail: { stage: found.version.stage } });
    return true;
  });
}

/** Sets (or with value null removes) one version tag atomically; false when the version does not exist. */
export async function setVersionTag(db: Db, organizationId: string, name: string, version: number, key: string, value: string | null): Promise<boolean> {
  const found = await getVersion(db, organizationId, name, version);
  if (!found) return false;
  const tags = value === null ? sql`${modelVersions.tags} - ${key}::text` : sql`${modelVersions.tags} || jsonb_build_object(${key}::text, ${value}::text)`;
  await db.update(modelVersions).set({ tags }).where(eq(modelVersions.id, found.version.id));
  return true;
}

/**
 * Moves a version to a stage, in one transaction with an audit row and a model.promoted event.
 * `archiveExisting`: true archives every other version in the target stage (MLflow's archive_existing_versions);
 * false refuses to leave two production versions (StageConflictError); undefined archives the previous
 * production version when promoting to production (the registry's rule) and leaves other stages alone.
 */
export async function transitionStage(
  db: Db,
  p: {
    organizationId: string;
    modelName: string;
    version: number;
    stage: ModelStage;
    actor: string;
    reason: string;
    archiveExisting?: boolean;
    quarantineOverride?: string;
    /** registry.require_gate_for_production; unset: required */
    requireGate?: boolean;
  },
): Promise<{ version: ModelVersionRow; archived: number[] }> {
  return db.transaction(async (tx) => {
    const model = await getModel(tx, p.organizationId, p.modelName);
    if (!model) throw new NotFoundError(`model "${p.modelName}" does not exist`);
    await lockModel(tx, model.id);
    const [target] = await tx
      .select()
      .from(modelVersions)
      .where(and(eq(modelVersions.modelId, model.id), eq(modelVersions.version, p.version)));
    if (!target) throw new NotFoundError(`model "${p.modelName}" has no version ${p.version}`);
    checkRegistered(target, p);
    const unquarantined = checkQuarantine(target, p);
    const ungatedOverride = checkGate(target, p);
    const overridden = unquarantined || ungatedOverride ? { ...(target.tags as Record<string, string>), ...unquarantined, ...ungatedOverride } : null;
    const others = and(eq(modelVersions.modelId, model.id), ne(modelVersions.version, p.version));
    const now = new Date();
    let archived: number[] = [];
    if (p.archiveExisting === true || (p.archiveExisting === undefined && p.stage === 'production')) {
      const demoted = await tx
        .update(modelVersions)
        .set({ stage: 'archived', stageChangedAt: now, lastUpdatedAt: now })
        .where(and(others, eq(modelVersions.stage, p.stage)))
        .returning({ version: modelVersions.version });
      archived = demoted.map((d) => d.version).sort((a, b) => a - b);
    } else if (p.stage === 'production') {
      const [current] = await tx
        .select({ version: modelVersions.version })
        .from(modelVersions)
        .where(and(others, eq(modelVersions.stage, 'production')));
      if (current)
        throw new StageConflictError(
          `version ${current.version} of model "${p.modelName}" is in production and a model has one production version; ` +
            `move it out of production first or set archive_existing_versions`,
        );
    }
    const [row] = await tx
      .update(modelVersions)
      .set({ stage: p.stage, stageChangedAt: now, lastUpdatedAt: now, ...(overridden ? { tags: overridden } : {}) })
      .where(eq(modelVersions.id, target.id))
      .returning();
    if (ungatedOverride)
      await audit(tx, {
        organizationId: p.organizationId,
        actor: p.actor,
        action: 'model.gate.override',
        target: `${p.modelName}/${p.version}`,
        detail: { override_reason: p.quarantineOverride, stage: p.stage, gate: 'ungated' },
      });
    if (unquarantined)
      await audit(tx, {
        organizationId: p.organizationId,
        actor: p.actor,
        action: 'model.quarantine.override',
        target: `${p.modelName}/${p.version}`,
        detail: { override_reason: p.quarantineOverride, stage: p.stage, quarantine_reason: unquarantined[QUARANTINE_REASON_TAG] ?? null },
      });
    await tx.update(registeredModels).set({ lastUpdatedAt: now }).where(eq(registeredModels.id, model.id));
    await emitEvent(tx, p.organizationId, 'models', p.modelName, { event: 'model.promoted', name: p.modelName, version: p.version, stage: p.stage, archived });
    await audit(tx, {
      organizationId: p.organizationId,
      actor: p.actor,
      action: `model.stage.${p.stage}`,
      target: `${p.modelName}/${p.version}`,
      detail: { reason: p.reason, from: target.stage, archived },
    });
    return { version: row!, archived };
  });
}

/**
 * Records a gate decision on a version as a pipeline's registration does (metrics.gate and the gate's tags, which
 * replace those of an earlier decision), with an audit row; null when the version does not exist.
 */
export async function recordGateDecision(
  db: Db,
  p: { organizationId: string; modelName: string; version: number; gate: Record<string, unknown>; tags: Record<string, string>; actor: string; detail?: Record<string, unknown> },
): Promise<ModelVersionRow | null> {
  return db.transaction(async (tx) => {
    const found = await getVersion(tx, p.organizationId, p.modelName, p.version);
    if (!found) return null;
    const kept = Object.fromEntries(Object.entries(found.version.tags as Record<string, string>).filter(([k]) => !GATE_TAGS.includes(k)));
    const suite: Record<string, string> = typeof p.gate.suite === 'string' ? { eval_suite: p.gate.suite } : {};
    const [row] = await tx
      .update(modelVersions)
      .set({ metrics: { ...(found.version.metrics as Record<string, unknown>), gate: p.gate }, tags: { ...kept, ...suite, ...p.tags }, lastUpdatedAt: new Date() })
      .where(eq(modelVersions.id, found.version.id))
      .returning();
    await audit(tx, { organizationId: p.organizationId, actor: p.actor, action: 'model.gate.evaluate', target: `${p.modelName}/${p.version}`, detail: { suite: p.gate.suite, verdict: p.gate.verdict ?? null, reason: p.gate.reason, ...p.detail } });
    return row!;
  });
}

/** The version numbers of a model currently in production (at most one). */
export async function productionVersionOf(db: Tx, modelId: string): Promise<number | null> {
  const [row] = await db
    .select({ version: modelVersions.version })
    .from(modelVersions)
    .where(and(eq(modelVersions.modelId, modelId), eq(modelVersions.stage, 'production')));
  return row?.version ?? null;
}

function versionCondition(c: RegistryComparison): SQL {
  if (c.entity === 'tag') return compare(sql`(${modelVersions.tags} ->> ${c.key}::text)`, c);
  const column: Record<string, SQL> = {
    name: sql`${registeredModels.name}`,
    // A run id the client named that is not one of ours is kept in lineage (see the MLflow create route).
    run_id: sql`coalesce(${modelVersions.runId}, ${modelVersions.lineage} ->> 'run_id')`,
    source_path: sql`${modelVersions.source}`,
    version_number: sql`${modelVersions.version}`,
  };
  return compare(column[c.key]!, c);
}

const VERSION_ORDER: Record<RegistryOrder['column'], SQL> = {
  name: sql`${registeredModels.name}`,
  version: sql`${modelVersions.version}`,
  created: epochMs(sql`${modelVersions.createdAt}`),
  updated: epochMs(sql`${modelVersions.lastUpdatedAt}`),
};

/** One page of versions across the organization's models, with their model rows. */
export async function searchVersions(
  db: Db,
  organizationId: string,
  q: { filter: RegistryComparison[]; orderBy: RegistryOrder[]; offset: number; limit: number },
): Promise<{ rows: { model: RegisteredModelRow; version: ModelVersionRow }[]; more: boolean }> {
  const order = q.orderBy.map((o) => sql`${VERSION_ORDER[o.column]} ${sql.raw(o.ascending ? 'asc' : 'desc')}`);
  if (!q.orderBy.some((o) => o.column === 'name')) order.push(sql`${registeredModels.name} asc`);
  if (!q.orderBy.some((o) => o.column === 'version')) order.push(sql`${modelVersions.version} desc`);
  const rows = await db
    .select({ model: registeredModels, version: modelVersions })
    .from(modelVersions)
    .innerJoin(registeredModels, eq(registeredModels.id, modelVersions.modelId))
    .where(and(eq(registeredModels.organizationId, organizationId), ...withoutPrompts(q.filter, sql`${modelVersions.tags}`, versionCondition)))
    .orderBy(...order)
    .limit(q.limit + 1)
    .offset(q.offset);
  return { rows: rows.slice(0, q.limit), more: rows.length > q.limit };
}

// ---- aliases ----

/** Points an alias at an existing version (moving it if it pointed elsewhere). */
export async function setAlias(db: Db, modelId: string, alias: string, version: number): Promise<void> {
  await db
    .insert(modelAliases)
    .values({ modelId, alias, version })
    .onConflictDoUpdate({ target: [modelAliases.modelId, modelAliases.alias], set: { version } });
  await db.update(registeredModels).set({ lastUpdatedAt: new Date() }).where(eq(registeredModels.id, modelId));
}

export async function deleteAlias(db: Db, modelId: string, alias: string): Promise<void> {
  await db.delete(modelAliases).where(and(eq(modelAliases.modelId, modelId), eq(modelAliases.alias, alias)));
}

export async function aliasTarget(db: Tx, modelId: string, alias: string): Promise<number | null> {
  const [row] = await db
    .select({ version: modelAliases.version })
    .from(modelAliases)
    .where(and(eq(modelAliases.modelId, modelId), eq(modelAliases.alias, alias)));
  return row?.version ?? null;
}

// ---- /v1 listings ----

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
  const model = await getModel(db, organizationId, name);
  if (!model) return null;
  return db.select().from(modelVersions).where(eq(modelVersions.modelId, model.id)).orderBy(desc(modelVersions.version));
}

export function modelView(m: RegisteredModelRow): Record<string, unknown> {
  return {
    name: m.name,
    description: m.description,
    tags: m.tags,
    created_at: m.createdAt.toISOString(),
    last_updated_at: m.lastUpdatedAt.toISOString(),
  };
}

export function modelVersionView(name: string, v: ModelVersionRow): Record<string, unknown> {
  return {
    name,
    version: v.version,
    stage: v.stage,
    run_id: v.runId,
    dataset_id: v.datasetId,
    source: v.source,
    description: v.description,
    architecture: v.architecture,
    base_model: v.baseModel,
    method: v.method,
    status: v.status,
    status_message: v.statusMessage,
    checksum: v.checksum,
    formats: orderFormats(Object.keys(v.artifacts as Record<string, unknown>)),
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
