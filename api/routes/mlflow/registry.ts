// MLflow's model-registry REST API (registered-models/*, model-versions/*) over our registry: MLflow's stages
// None/Staging/Production/Archived are ours (none/staging/production/archived). A model keeps one production
// version: promoting archives the previous one (spec 000), and archive_existing_versions also archives the other
// versions of the target stage. Anything touching production needs the approver role and
// leaves an audit row. Validation, limits, messages and error codes are MLflow's.
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../../deps.js';
import { ApiError, describeZodError, invalid } from '../../errors.js';
import { requireRole } from '../../auth.js';
import type { Principal } from '../../../db/repo/auth.js';
import {
  MlflowAliasRefSchema,
  MlflowAliasSchema,
  MlflowCreateModelSchema,
  MlflowCreateVersionSchema,
  MlflowLatestVersionsSchema,
  MlflowModelNameSchema,
  MlflowModelTagKeySchema,
  MlflowModelTagSchema,
  MlflowRenameModelSchema,
  MlflowSearchSchema,
  MlflowTransitionSchema,
  MlflowUpdateModelSchema,
  MlflowUpdateVersionSchema,
  MlflowVersionRefSchema,
  MlflowVersionTagKeySchema,
  MlflowVersionTagSchema,
  type ModelStage,
} from '../../../contracts/models.js';
import {
  aliasTarget,
  aliasesOf,
  createModel,
  deleteAlias,
  deleteModel,
  deleteVersion,
  getModel,
  getVersion,
  latestVersionsPerStage,
  renameModel,
  searchModels,
  searchVersions,
  setAlias,
  isUngated,
  ungatedMessage,
  setModelTag,
  setVersionTag,
  StageConflictError,
  transitionStage,
  updateModelDescription,
  updateVersionDescription,
  type ModelVersionRow,
  type NewModelVersion,
  type RegisteredModelRow,
  type RegistryOrder,
} from '../../../db/repo/models.js';
import { getLoggedModel, recordModelVersionOnLoggedModel } from '../../../db/repo/logged-models.js';
import { getRun, isOtherOrganizationsRun } from '../../../db/repo/runs.js';
import { decodePageToken, encodePageToken, invalidValue, mlflowRequest, validateKey, validateLength } from './common.js';
import { parseFilter, type Grammar } from './search-filter.js';
import { checkVersionSource, keyOfUri, PROXY_SCHEME } from './artifact-store.js';
import { versionDownloadUri } from './version-artifacts.js';
import { artifactRootUri } from '../../../lib/object-store.js';
import { filesUnder, type SourceFile } from '../../../lib/model-artifacts.js';
import { filesOfLocation, filesPlan, registerVersion, versionCopyPlan } from '../../model-files.js';
import { quarantineOverride, refuseGateTag, refusingQuarantined } from '../../quarantine.js';
import { QUARANTINE_OVERRIDE_TAG, QUARANTINE_REASON_TAG, QUARANTINE_TAG } from '../../../contracts/eval-suite.js';
import { notifyProductionChange, PRODUCTION_ALIAS } from '../../production-change.js';

const MAX_TAG_VALUE = 100_000;
const MAX_ALIAS = 255;
const STAGE_NAMES: Record<ModelStage, string> = { none: 'None', staging: 'Staging', production: 'Production', archived: 'Archived' };
const ALL_STAGES = Object.values(STAGE_NAMES);
const WIRE_STATUS: Record<ModelVersionRow['status'], string> = { pending_registration: 'PENDING_REGISTRATION', ready: 'READY', failed_registration: 'FAILED_REGISTRATION' };

const MODEL_GRAMMAR: Grammar = { what: 'registered model', attributes: { name: 'string' }, entities: ['tag', 'attribute'] };
const VERSION_GRAMMAR: Grammar = {
  what: 'model version',
  attributes: { name: 'string', run_id: 'string', source_path: 'string', version_number: 'number' },
  entities: ['tag', 'attribute'],
};

// ---- MLflow's validation, with its messages ----

const API_DOCS_HINT = 'See the API docs for more information about request parameters.';

/** Parses a request like MLflow's handlers: a missing required field is named in MLflow's words. */
async function registryRequest<S extends z.ZodType>(c: Context<AppEnv>, schema: S): Promise<z.infer<S>> {
  const raw = await mlflowRequest(c, z.unknown());
  const parsed = schema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const missing = parsed.error.issues.find((i) => i.message.startsWith('Missing value for required parameter'));
  if (missing) throw invalid(`${missing.message} ${API_DOCS_HINT}`);
  throw invalid(describeZodError(parsed.error, 'request'));
}

function validateModelName(name: string): void {
  if (name.trim() === '') throw invalid("Missing value for required parameter 'name'.");
  if (name.includes('/') || name.includes(':')) throw invalid(`Invalid model name '${name}'. Names cannot contain '/' or ':'.`);
  // Without '/', posixpath.normpath changes nothing, so only '.' and names starting '..' resolve elsewhere.
  if (name === '.' || name.startsWith('..'))
    throw invalidValue('name', name, `Names may be treated as files in certain cases, and must not resolve to other names when treated as such. This name would resolve to '${name}'`);
}

function parseVersion(version: string): number {
  if (!/^\s*[-+]?\d+\s*$/.test(version)) throw invalid(`Parameter 'version' must be an integer, got '${version}'.`);
  return Number(version);
}

function validateTag(key: string, value: string | null | undefined): string {
  validateKey(key, 'key');
  if (value === null || value === undefined) throw invalid('Tag value cannot be None');
  validateLength('value', value, MAX_TAG_VALUE);
  return value;
}

function validateAlias(alias: string): void {
  if (alias === '') throw invalid('Registered model alias name cannot be empty.');
  if (!/^[\w-]*$/.test(alias)) throw invalid(`Invalid alias name: '${alias}'. Names may only contain alphanumerics, underscores (_), and dashes (-).`);
  validateLength('Registered model alias name', alias, MAX_ALIAS);
}

function canonicalStage(stage: string): ModelStage {
  const found = (Object.keys(STAGE_NAMES) as ModelStage[]).find((s) => s === stage.toLowerCase());
  if (!found) throw invalid(`Invalid Model Version stage: ${stage}. Value must be one of ${ALL_STAGES.join(', ')}.`);
  return found;
}

function parseOrder(clause: string, keys: Record<string, RegistryOrder['column']>, invalidKey: (key: string) => ApiError): RegistryOrder {
  const m = /^\s*(`[^`]+`|[\w.]+)\s*(asc|desc)?\s*$/i.exec(clause);
  if (!m) throw invalid(`Invalid order_by clause '${clause}'. Could not be parsed.`);
  const key = m[1]!.replace(/`/g, '');
  const column = keys[key];
  if (!column) throw invalidKey(key);
  return { column, ascending: (m[2] ?? 'asc').toLowerCase() === 'asc' };
}

function orderBy(clauses: string[], keys: Record<string, RegistryOrder['column']>, invalidKey: (key: string) => ApiError): RegistryOrder[] {
  const out = clauses.map((c) => parseOrder(c, keys, invalidKey));
  if (new Set(out.map((o) => o.column)).size !== out.length) throw invalid(`\`order_by\` contains duplicate fields: [${clauses.map((c) => `'${c}'`).join(', ')}]`);
  return out;
}

function searchLimit(c: Context<AppEnv>, value: number | undefined, fallback: number, limit: number): number {
  const n = value ?? fallback;
  // MLflow checks the limit on the raw value; from a query string that is text, and its message says so.
  if (n > limit && c.req.method === 'GET')
    throw invalid(`Invalid value "${c.req.query('max_results')}" for parameter 'max_results' supplied:  Hint: Value was of type 'str'. ${API_DOCS_HINT}`);
  if (n > limit) throw invalid(`Invalid value ${n} for parameter 'max_results' supplied:  Hint: Value was of type 'int'. ${API_DOCS_HINT}`);
  if (n < 1) throw invalid(`Invalid value for max_results. It must be a positive integer, but got ${n}`);
  return n;
}

// ---- wire shapes (model_registry.proto RegisteredModel, ModelVersion) ----

const kv = (tags: Record<string, string>) => Object.entries(tags).map(([key, value]) => ({ key, value }));

function versionWire(name: string, v: ModelVersionRow, aliases: { alias: string; version: number }[]) {
  return {
    name,
    version: String(v.version),
    creation_timestamp: v.createdAt.getTime(),
    last_updated_timestamp: v.lastUpdatedAt.getTime(),
    user_id: v.createdBy,
    current_stage: STAGE_NAMES[v.stage],
    description: v.description,
    source: v.source ?? '',
    run_id: wireRunId(v),
    ...(v.runLink ? { run_link: v.runLink } : {}),
    status: WIRE_STATUS[v.status],
    ...(v.statusMessage ? { status_message: v.statusMessage } : {}),
    tags: kv(v.tags),
    aliases: aliases.filter((a) => a.version === v.version).map((a) => a.alias),
  };
}

/** The run a version names: the linked run, or the id the client gave when it is not one of ours. */
function wireRunId(v: ModelVersionRow): string {
  return v.runId ?? (v.lineage as { run_id?: string }).run_id ?? '';
}

function modelWire(m: RegisteredModelRow, latest: ModelVersionRow[], aliases: { alias: string; version: number }[]) {
  return {
    name: m.name,
    creation_timestamp: m.createdAt.getTime(),
    last_updated_timestamp: m.lastUpdatedAt.getTime(),
    ...(m.description ? { description: m.description } : {}),
    latest_versions: latest.map((v) => versionWire(m.name, v, aliases)),
    tags: kv(m.tags),
    aliases: aliases.map((a) => ({ alias: a.alias, version: String(a.version) })),
  };
}

export function mlflowRegistryRoutes(app: Hono<AppEnv>, deps: ApiDeps): void {
  const db = deps.db;
  const route = <S extends z.ZodType>(
    methods: ('get' | 'post' | 'patch' | 'delete')[],
    path: string,
    schema: S,
    handler: (body: z.infer<S>, c: Context<AppEnv>) => Promise<unknown>,
  ) => {
    for (const method of methods) app[method](path, async (c) => c.json((await handler(await registryRequest(c, schema), c)) as Record<string, unknown>));
  };

  async function modelOf(p: Principal, name: string): Promise<RegisteredModelRow> {
    validateModelName(name);
    const model = await getModel(db, p.organizationId, name);
    if (!model) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Registered Model with name=${name} not found`);
    return model;
  }
  async function versionOf(p: Principal, name: string, version: string): Promise<{ model: RegisteredModelRow; version: ModelVersionRow }> {
    validateModelName(name);
    const n = parseVersion(version);
    const found = await getVersion(db, p.organizationId, name, n);
    if (!found) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Model Version (name=${name}, version=${n}) not found`);
    return found;
  }
  async function modelResponse(m: RegisteredModelRow) {
    const [latest, aliases] = await Promise.all([latestVersionsPerStage(db, [m.id]), aliasesOf(db, [m.id])]);
    return { registered_model: modelWire(m, latest.get(m.id)!, aliases.get(m.id)!) };
  }
  async function versionResponse(name: string, modelId: string, v: ModelVersionRow) {
    return { model_version: versionWire(name, v, (await aliasesOf(db, [modelId])).get(modelId)!) };
  }

  // ---- registered models ----

  route(['post'], '/registered-models/create', MlflowCreateModelSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    const tags: Record<string, string> = {};
    for (const t of body.tags) tags[t.key] = validateTag(t.key, t.value);
    const created = await createModel(db, { organizationId: p.organizationId, name: body.name, description: body.description ?? '', tags, actor: p.subject });
    if (!created) throw new ApiError('RESOURCE_ALREADY_EXISTS', `Registered Model (name=${body.name}) already exists.`);
    return modelResponse(created);
  });

  route(['get'], '/registered-models/get', MlflowModelNameSchema, async (q, c) => modelResponse(await modelOf(requireRole(c, 'viewer'), q.name)));

  route(['post'], '/registered-models/rename', MlflowRenameModelSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    if (!body.new_name || body.new_name.trim() === '') throw invalid("Missing value for required parameter 'new_name'.");
    validateModelName(body.new_name);
    await modelOf(p, body.name);
    const renamed = await renameModel(db, p.organizationId, body.name, body.new_name, p.subject);
    if (renamed === 'missing') throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Registered Model with name=${body.name} not found`);
    if (renamed === 'taken') throw new ApiError('RESOURCE_ALREADY_EXISTS', `Registered Model (name=${body.new_name}) already exists.`);
    return modelResponse(renamed);
  });

  route(['patch', 'post'], '/registered-models/update', MlflowUpdateModelSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    await modelOf(p, body.name);
    const updated = await updateModelDescription(db, p.organizationId, body.name, body.description ?? '');
    if (!updated) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Registered Model with name=${body.name} not found`);
    return modelResponse(updated);
  });

  // Spec 000: deleting is ml-admin's (who may also approve, so a model holding the production version is covered).
  route(['delete'], '/registered-models/delete', MlflowModelNameSchema, async (body, c) => {
    const p = requireRole(c, 'admin');
    await modelOf(p, body.name);
    await deleteModel(db, p.organizationId, body.name, p.subject);
    return {};
  });

  route(['get', 'post'], '/registered-models/search', MlflowSearchSchema, async (q, c) => {
    const p = requireRole(c, 'viewer');
    const limit = searchLimit(c, q.max_results, 100, 1000);
    const filter = parseFilter(q.filter, MODEL_GRAMMAR);
    for (const f of filter) if (f.entity === 'attribute' && f.key !== 'name') throw invalid(`Invalid attribute name: ${f.key}`);
    const order = orderBy(q.order_by, { name: 'name', timestamp: 'updated', last_updated_timestamp: 'updated' }, (key) =>
      invalid(`Invalid order by key '${key}' specified. Valid keys are '{'name', 'timestamp'}'`),
    );
    const offset = decodePageToken(q.page_token);
    const page = await searchModels(db, p.organizationId, { filter, orderBy: order, offset, limit });
    const ids = page.rows.map((m) => m.id);
    const [latest, aliases] = await Promise.all([latestVersionsPerStage(db, ids), aliasesOf(db, ids)]);
    return {
      registered_models: page.rows.map((m) => modelWire(m, latest.get(m.id)!, aliases.get(m.id)!)),
      ...(page.more ? { next_page_token: encodePageToken(offset + limit) } : {}),
    };
  });

  route(['get', 'post'], '/registered-models/get-latest-versions', MlflowLatestVersionsSchema, async (body, c) => {
    const p = requireRole(c, 'viewer');
    const model = await modelOf(p, body.name);
    const wanted = new Set(body.stages.length ? body.stages.map(canonicalStage) : (Object.keys(STAGE_NAMES) as ModelStage[]));
    const [latest, aliases] = await Promise.all([latestVersionsPerStage(db, [model.id]), aliasesOf(db, [model.id])]);
    return { model_versions: latest.get(model.id)!.filter((v) => wanted.has(v.stage)).map((v) => versionWire(model.name, v, aliases.get(model.id)!)) };
  });

  route(['post'], '/registered-models/set-tag', MlflowModelTagSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    const value = validateTag(body.key, body.value ?? '');
    await modelOf(p, body.name);
    await setModelTag(db, p.organizationId, body.name, body.key, value);
    return {};
  });

  route(['delete'], '/registered-models/delete-tag', MlflowModelTagKeySchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    validateKey(body.key, 'key');
    await modelOf(p, body.name);
    await setModelTag(db, p.organizationId, body.name, body.key, null);
    return {};
  });

  // ---- aliases ----

  route(['post'], '/registered-models/alias', MlflowAliasSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    validateAlias(body.alias);
    if (body.alias.toLowerCase() === 'latest') throw invalid("'latest' alias name (case insensitive) is reserved.");
    if (/^[vV]\d+$/.test(body.alias)) throw invalid(`Version alias name '${body.alias}' is reserved.`);
    const { model, version } = await versionOf(p, body.name, body.version);
    // An alias is how a client picks the version it serves: naming a new one is a researcher's, moving one ml-admin's.
    const current = await aliasTarget(db, model.id, body.alias);
    if (current !== null && current !== version.version) requireRole(c, 'admin');
    // A quarantined version needs the admin override first.
    const tags = version.tags as Record<string, string>;
    if (tags[QUARANTINE_TAG] === 'true' && !tags[QUARANTINE_OVERRIDE_TAG])
      throw new ApiError('INVALID_STATE', `version ${version.version} of model "${model.name}" is quarantined by the promotion gate (${tags[QUARANTINE_REASON_TAG] ?? ''}); an admin must override it (transition-stage with a comment) before it can carry an alias`);
    // The `production` alias serves like the production stage: an ungated version needs evaluating or an override first.
    if (body.alias === PRODUCTION_ALIAS && deps.config.registry.require_gate_for_production && isUngated(version))
      throw new ApiError('INVALID_STATE', ungatedMessage(model.name, version.version));
    await setAlias(db, model.id, body.alias, version.version);
    // The `production` alias is a road to serving like the stage: moving it is a production change.
    if (body.alias === PRODUCTION_ALIAS && current !== version.version)
      await notifyProductionChange(deps, { organizationId: p.organizationId, modelName: model.name, version, replaced: current === null ? [] : [current], actor: p.subject, at: new Date() });
    return {};
  });

  route(['delete'], '/registered-models/alias', MlflowAliasRefSchema, async (body, c) => {
    const p = requireRole(c, 'admin');
    validateModelName(body.name);
    validateAlias(body.alias);
    const model = await modelOf(p, body.name);
    await deleteAlias(db, model.id, body.alias);
    return {};
  });

  route(['get'], '/registered-models/alias', MlflowAliasRefSchema, async (q, c) => {
    const p = requireRole(c, 'viewer');
    validateModelName(q.name);
    validateAlias(q.alias);
    const model = await modelOf(p, q.name);
    let version: number | null;
    if (q.alias.toLowerCase() === 'latest') {
      const latest = (await latestVersionsPerStage(db, [model.id])).get(model.id)!;
      if (!latest.length) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Latest version not found for model ${q.name}.`);
      version = Math.max(...latest.map((v) => v.version));
    } else {
      version = await aliasTarget(db, model.id, q.alias);
      if (version === null) throw invalid(`Registered model alias ${q.alias} not found.`);
    }
    const found = await versionOf(p, q.name, String(version));
    return versionResponse(model.name, model.id, found.version);
  });

  // ---- model versions ----

  /**
   * MLflow's source rule: a local or proxied location must lie inside the run's artifact root; `runs:/<id>/...` must
   * name the run_id given. Other locations are taken as given, and so is a run_id that is only lineage: MLflow does
   * not look the run up, and neither do we (refuseOthersRuns answers another organization's run as not found).
   */
  function checkSource(p: Principal, source: string, runId: string | undefined): Promise<void> | void {
    const refuse = () => {
      throw invalid(`Invalid model version source: '${source}'. The run_id request parameter must identify the resource that contains the source.`);
    };
    if (/^[a-z][\w+.-]*:\/\/[^/]/i.test(source) && !/^(s3|gs|wasbs?|abfss?|hdfs|https?):/i.test(source)) refuse();
    checkVersionSource(source);
    const runsUri = /^runs:\/(\/?)([^/]*)/.exec(source);
    if (runsUri) {
      if (runsUri[1] === '/' || !runId || runsUri[2] !== runId) refuse();
      return;
    }
    const local = source.startsWith('/') || source.startsWith('file:') || !/^[a-z][\w+.-]*:/i.test(source);
    if (local || source.startsWith(PROXY_SCHEME))
      return (async () => {
        const run = runId ? await getRun(db, p.organizationId, runId) : null;
        if (!run || !withinRunArtifacts(source, run.artifactUri)) refuse();
      })();
  }

  /**
   * A copy (`models:/<name>/<version>` or `models:/<name>@<alias>`, as `copy_model_version` sends): the source is
   * normalized to `models:/<name>/<version>`, run and logged model carry over unless given, and must match if given.
   * Null when the source is no registered-model reference (`models:/<logged model id>` is handled with model_id).
   */
  async function copiedVersionSource(p: Principal, body: { source: string; run_id?: string | undefined; model_id?: string | undefined }) {
    if (body.source.startsWith('models://'))
      throw invalid(`Invalid model version source: '${body.source}'. Registered model sources must use the active model registry.`);
    const m = /^models:\/([^/@]+)(?:\/([^/]+)|@([\w-]+))\/?$/.exec(body.source);
    if (!m) return null;
    const model = await modelOf(p, m[1]!);
    const number = m[2] !== undefined ? parseVersion(m[2]) : await aliasTarget(db, model.id, m[3]!);
    if (number === null) throw invalid(`Registered model alias ${m[3]} not found.`);
    const { version } = await versionOf(p, model.name, String(number));
    const sourceRunId = wireRunId(version);
    if ((body.run_id !== undefined && body.run_id !== sourceRunId) || (body.model_id !== undefined && body.model_id !== (version.loggedModelId ?? '')))
      throw invalid(`Invalid model version source: '${body.source}'. The run_id and model_id request parameters must match the referenced model version.`);
    return {
      from: version,
      source: `models:/${model.name}/${version.version}`,
      runId: body.run_id ?? (sourceRunId || null),
      modelId: body.model_id ?? version.loggedModelId,
      storageLocation: version.storageLocation ?? version.source,
    };
  }

  /** Whether a location lies inside a run's artifact root, compared as URIs or as keys in our artifact bucket. */
  function withinRunArtifacts(source: string, artifactUri: string): boolean {
    const within = (inner: string, root: string) => inner === root || inner.startsWith(`${root.replace(/\/+$/, '')}/`);
    if (within(source, artifactUri)) return true;
    const [sourceKey, rootKey] = [keyOfUri(deps, source), keyOfUri(deps, artifactUri)];
    return sourceKey !== null && rootKey !== null && within(sourceKey, rootKey);
  }

  /**
   * A version registered from an MLflow 3 logged model (`mlflow.register_model("models:/<id>", ...)`): the source
   * must be that model or lie inside its artifacts; the files are read from the model's artifact location.
   */
  async function loggedModelSource(p: Principal, source: string, modelId: string): Promise<{ storageLocation: string | null; runId: string | null }> {
    const refuse = () => invalid(`Invalid model version source: '${source}'. The model_id request parameter must identify the resource that contains the source.`);
    const logged = await getLoggedModel(db, p.organizationId, modelId);
    if (!logged) throw refuse();
    const modelsUri = /^models:\/(\/?)([^/]+)\/?$/.exec(source);
    if (modelsUri) {
      if (modelsUri[1] === '/' || modelsUri[2] !== modelId) throw refuse();
      return { storageLocation: logged.artifactLocation, runId: logged.sourceRunId };
    }
    if (source.startsWith('runs:') || !withinRunArtifacts(source, logged.artifactLocation)) throw refuse();
    return { storageLocation: null, runId: logged.sourceRunId };
  }

  /**
   * The files of a source that lies in our artifact store (`runs:/<run>/<path>`, a proxied or stored location,
   * a logged model's artifacts); none for a location elsewhere (MLflow takes it as given, and so do we).
   */
  async function sourceFiles(location: string, run: { artifactUri: string } | null, ofLoggedModel: boolean): Promise<SourceFile[]> {
    const runsUri = /^runs:\/[^/]+\/?(.*)$/.exec(location);
    const resolved = runsUri ? (run ? `${run.artifactUri.replace(/\/+$/, '')}/${runsUri[1]!}`.replace(/\/+$/, '') : null) : location;
    // Only files the caller's organization owns: inside its run's artifacts, or its logged model's (checked above).
    if (resolved === null || !(ofLoggedModel || (run && withinRunArtifacts(resolved, run.artifactUri)))) return [];
    const key = keyOfUri(deps, resolved);
    return key === null ? [] : filesUnder(deps.store, `${artifactRootUri(deps)}/${key}`);
  }

  /**
   * The runs a new version names: its run_id, and the run of a `runs:/<run>/...` or proxied
   * `mlflow-artifacts:/<experiment>/<run>/...` source. MLflow takes a run that exists nowhere as lineage only, and
   * so do we; another organization's run is answered as the caller's lookup of it would be, before anything is written.
   */
  async function refuseOthersRuns(p: Principal, source: string, runId: string | undefined): Promise<void> {
    const named = [runId, /^runs:\/([^/]+)/.exec(source)?.[1], /^mlflow-artifacts:\/*[^/]+\/([^/]+)/.exec(source)?.[1]];
    for (const id of new Set(named.filter((n): n is string => Boolean(n))))
      if (await isOtherOrganizationsRun(db, p.organizationId, id)) throw new ApiError('RESOURCE_DOES_NOT_EXIST', `Run with id=${id} not found`);
  }

  route(['post'], '/model-versions/create', MlflowCreateVersionSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    await refuseOthersRuns(p, body.source, body.run_id || undefined);
    const tags: Record<string, string> = {};
    for (const t of body.tags) tags[t.key] = validateTag(t.key, t.value);
    checkVersionSource(body.source);
    let storageLocation: string | null = null;
    let source = body.source;
    let runId = body.run_id || null;
    let loggedModelId = body.model_id || null;
    const copy = body.source.startsWith('models:') ? await copiedVersionSource(p, body) : null;
    if (copy) {
      ({ source, runId, storageLocation } = copy);
      loggedModelId = copy.modelId || null;
    } else if (body.model_id) {
      const resolved = await loggedModelSource(p, body.source, body.model_id);
      storageLocation = resolved.storageLocation;
      runId ??= resolved.runId;
    } else {
      if (body.source.startsWith('models:')) throw invalid(`Invalid model version source: '${body.source}'. The model_id request parameter must identify the resource that contains the source.`);
      await checkSource(p, body.source, runId ?? undefined);
    }
    const model = await modelOf(p, body.name);
    // The run is linked when it is one of the caller's; otherwise its id is lineage only, shown as given.
    const run = runId ? await getRun(db, p.organizationId, runId) : null;
    const linkedRun = run ? run.id : null;
    // Files in our artifact store are copied under the version's prefix, so overwriting the run's (or logged
    // model's) artifacts later cannot change the version; a copy of a registered version copies its files of
    // record under the new version's prefix in the same way.
    const version: NewModelVersion = {
      organizationId: p.organizationId,
      modelName: body.name,
      runId: linkedRun,
      source,
      storageLocation,
      loggedModelId,
      description: body.description ?? '',
      runLink: body.run_link || null,
      tags,
      lineage: { ...(runId ? { run_id: runId } : {}), ...(loggedModelId ? { logged_model_id: loggedModelId } : {}) },
      createdBy: p.subject,
    };
    // The files are copied by a workflow: the answer says PENDING_REGISTRATION and the client polls
    // model-versions/get until READY (or FAILED_REGISTRATION with a status_message).
    const copied = copy ? await versionCopyPlan(deps, copy.from) : { plan: filesPlan(await filesOfLocation('source', sourceFiles(storageLocation ?? body.source, run, Boolean(body.model_id)))), fields: {} };
    const row = await registerVersion(c, deps, { ...version, ...copied.fields }, copied.plan, async (tx, created) => {
      if (loggedModelId) await recordModelVersionOnLoggedModel(tx as unknown as typeof db, p.organizationId, loggedModelId, body.name, created.version);
    });
    return versionResponse(model.name, model.id, row);
  });

  route(['get'], '/model-versions/get', MlflowVersionRefSchema, async (q, c) => {
    const { model, version } = await versionOf(requireRole(c, 'viewer'), q.name, q.version);
    return versionResponse(model.name, model.id, version);
  });

  route(['patch', 'post'], '/model-versions/update', MlflowUpdateVersionSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    const { model, version } = await versionOf(p, body.name, body.version);
    const row = body.description === undefined ? version : await updateVersionDescription(db, p.organizationId, body.name, version.version, body.description);
    return versionResponse(model.name, model.id, row ?? version);
  });

  route(['delete'], '/model-versions/delete', MlflowVersionRefSchema, async (body, c) => {
    const p = requireRole(c, 'admin');
    const { version } = await versionOf(p, body.name, body.version);
    await deleteVersion(db, p.organizationId, body.name, version.version, p.subject);
    return {};
  });

  route(['post'], '/model-versions/transition-stage', MlflowTransitionSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    const stage = canonicalStage(body.stage);
    if (body.archive_existing_versions && stage !== 'staging' && stage !== 'production')
      throw invalid(`Model version transition cannot archive existing model versions because '${body.stage}' is not an Active stage. Valid stages are ['Staging', 'Production']`);
    const { model, version } = await versionOf(p, body.name, body.version);
    // Production changes what is served: entering or leaving it takes an approver.
    if (stage === 'production' || version.stage === 'production') requireRole(c, 'approver');
    const override = quarantineOverride(c, body.comment);
    try {
      const { version: row, archived } = await refusingQuarantined(() => transitionStage(db, {
        organizationId: p.organizationId,
        modelName: model.name,
        version: version.version,
        stage,
        actor: p.subject,
        reason: `MLflow transition-stage to ${STAGE_NAMES[stage]}${body.archive_existing_versions ? ' (archive_existing_versions)' : ''}`,
        // Without the flag the registry's own rule applies (spec 000): a new production version archives the
        // previous one, and other stages keep theirs, which is what MLflow shows for one production version.
        archiveExisting: body.archive_existing_versions ? true : undefined,
        quarantineOverride: override,
        requireGate: deps.config.registry.require_gate_for_production,
      }));
      if (row.stage === 'production' && version.stage !== 'production')
        await notifyProductionChange(deps, { organizationId: p.organizationId, modelName: model.name, version: row, replaced: archived, actor: p.subject });
      return versionResponse(model.name, model.id, row);
    } catch (err) {
      if (err instanceof StageConflictError) throw new ApiError('INVALID_STATE', err.message);
      throw err;
    }
  });

  route(['post'], '/model-versions/set-tag', MlflowVersionTagSchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    parseVersion(body.version);
    const value = validateTag(body.key, body.value);
    refuseGateTag(body.key);
    const { version } = await versionOf(p, body.name, body.version);
    await setVersionTag(db, p.organizationId, body.name, version.version, body.key, value);
    return {};
  });

  route(['delete'], '/model-versions/delete-tag', MlflowVersionTagKeySchema, async (body, c) => {
    const p = requireRole(c, 'developer');
    validateModelName(body.name);
    parseVersion(body.version);
    validateKey(body.key, 'key');
    refuseGateTag(body.key);
    const { version } = await versionOf(p, body.name, body.version);
    await setVersionTag(db, p.organizationId, body.name, version.version, body.key, null);
    return {};
  });

  // The copy of record when the version has one (its files cannot change after registration, unlike the run's);
  // otherwise the location it was registered from, as MLflow answers.
  route(['get'], '/model-versions/get-download-uri', MlflowVersionRefSchema, async (q, c) => {
    const { model, version } = await versionOf(requireRole(c, 'viewer'), q.name, q.version);
    return { artifact_uri: versionDownloadUri(model.name, version) ?? version.storageLocation ?? version.source ?? '' };
  });

  route(['get', 'post'], '/model-versions/search', MlflowSearchSchema, async (q, c) => {
    const p = requireRole(c, 'viewer');
    const limit = searchLimit(c, q.max_results, 10_000, 200_000);
    const filter = parseFilter(q.filter, VERSION_GRAMMAR);
    for (const f of filter)
      if (f.entity === 'attribute' && (f.op === 'IN' || f.op === 'NOT IN') && f.key !== 'name' && f.key !== 'run_id') throw invalid(`Invalid comparator for attribute: ${f.op}`);
    const order = orderBy(
      q.order_by.length ? q.order_by : ['last_updated_timestamp DESC', 'name ASC', 'version_number DESC'],
      { name: 'name', version_number: 'version', creation_timestamp: 'created', last_updated_timestamp: 'updated' },
      (key) => invalid(`Invalid order by key '${key}' specified. Valid keys are {'name', 'version_number', 'creation_timestamp', 'last_updated_timestamp'}`),
    );
    const offset = decodePageToken(q.page_token);
    const page = await searchVersions(db, p.organizationId, { filter, orderBy: order, offset, limit });
    const ids = [...new Set(page.rows.map((r) => r.model.id))];
    const aliases = await aliasesOf(db, ids);
    return {
      model_versions: page.rows.map((r) => versionWire(r.model.name, r.version, aliases.get(r.model.id)!)),
      ...(page.more ? { next_page_token: encodePageToken(offset + limit) } : {}),
    };
  });
}
