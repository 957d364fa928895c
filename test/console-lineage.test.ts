// GET /v1/models/{name}/versions/{version}/lineage on the real app (createApp) over PGlite: the chain a pipeline
// records for a version (dataset version and the one it was derived from -> pipeline and its jobs -> run ->
// checkpoints -> formats -> stage history with the approver) comes back in one answer, on PGlite and Postgres;
// another organization's version is 404, as is a version that does not exist; a bad version number is a 400 naming
// it. The rows are written through the same db functions the pipeline's activities use; Temporal is not used by the
// route and stands in as an empty client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appWithoutTemporal } from './support/api-app.js';
import type { ModelLineage } from '../contracts/models.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { seedDevOrganization } from '../db/repo/auth.js';
import { insertDatasetVersion } from '../db/repo/datasets.js';
import { createExperiment } from '../db/repo/experiments.js';
import { insertJob } from '../db/repo/jobs.js';
import { completeRegistration, registerModelVersion, transitionStage } from '../db/repo/models.js';
import { upsertPipeline } from '../db/repo/pipelines.js';
import { recordArtifact } from '../db/repo/run-artifacts.js';
import { createRun } from '../db/repo/runs.js';
import { testConfig, DEV_TOKEN } from './support/config.js';
import { startPostgres, type TestPostgres } from './support/postgres.js';

const OTHER = 'token-of-another-org';
const sha = (c: string) => c.repeat(64);

describe.each(['pglite', 'postgres'] as const)('model version lineage on %s', (engine) => {
  let pg: TestPostgres | null = null;
  let catalogue: Catalogue;
  let app: ReturnType<typeof appWithoutTemporal>;
  let parentId = '';
  let datasetId = '';

  const call = async <T = Record<string, unknown>>(path: string, token = DEV_TOKEN) => {
    const res = await app.request(path, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: (await res.json()) as T };
  };

  const dataset = (name: string, hash: string, parents: string[]) =>
    insertDatasetVersion(catalogue.db, {
      id: `ds-${hash}`,
      organizationId: 'dev',
      name,
      format: 'jsonl',
      storagePath: `file:///tmp/${hash}`,
      sizeBytes: 100,
      numRecords: 10,
      sha256: sha(hash),
      schema: {},
      metadata: {},
      tags: [],
      lineage: { parent_datasets: parents, transform: parents.length ? 'dedupe' : 'upload' },
      createdBy: 'dev',
    });

  beforeAll(async () => {
    if (engine === 'postgres') pg = await startPostgres();
    const loaded = testConfig();
    catalogue = await openCatalogue({ url: pg ? await pg.createDatabase('lineage') : undefined });
    await seedDevOrganization(catalogue.db, 'dev', DEV_TOKEN);
    await seedDevOrganization(catalogue.db, 'other-org', OTHER);
    app = appWithoutTemporal(catalogue.db, loaded);
    const db = catalogue.db;

    parentId = (await dataset('support-raw', 'a', [])).id;
    datasetId = (await dataset('support', 'b', [parentId])).id;
    await createExperiment(db, { id: 'exp-lineage', organizationId: 'dev', name: 'lineage', artifactLocation: 'file:///tmp/exp-lineage', tags: [] });
    await createRun(db, { id: 'run-lineage', organizationId: 'dev', experimentId: 'exp-lineage', name: 'train-support', userId: 'dev', artifactUri: 'file:///tmp/run-lineage' });
    await upsertPipeline(db, { id: 'pipe-1', organizationId: 'dev', modelName: 'support-bot', datasetName: 'support', stage: 'completed', outcome: 'promoted', input: {}, createdBy: 'dev' });
    for (const [id, type] of [['job-train', 'training'], ['job-eval', 'eval']] as const)
      await insertJob(db, { id, organizationId: 'dev', name: `pipe-1 ${type}`, submittedBy: 'dev', type, kind: 'pipeline', spec: {}, status: 'succeeded', workflowId: 'pipeline:pipe-1', runId: 'run-lineage', parent: 'pipeline:pipe-1' });
    // An unrelated job of the organization is not part of the chain.
    await insertJob(db, { id: 'job-other', organizationId: 'dev', name: 'other', submittedBy: 'dev', type: 'training', kind: 'command', spec: {}, status: 'running', workflowId: 'job:other' });
    for (const step of [30, 15])
      await recordArtifact(db, { runId: 'run-lineage', path: `checkpoints/step-${step}`, uri: `file:///tmp/ck/${step}`, sizeBytes: 1000 + step, sha256: sha(step === 15 ? 'c' : 'd'), metadata: { step, files: 3, kind: 'checkpoint' } });
    await recordArtifact(db, { runId: 'run-lineage', path: 'eval/results.json', uri: 'file:///tmp/eval.json', sizeBytes: 10, sha256: sha('e') });

    const row = await registerModelVersion(db, {
      organizationId: 'dev',
      modelName: 'support-bot',
      stage: 'staging',
      runId: 'run-lineage',
      datasetId,
      status: 'pending_registration',
      lineage: { run_id: 'run-lineage', dataset_id: datasetId, pipeline_id: 'pipe-1' },
      createdBy: 'dev',
      sourcePipeline: 'pipe-1',
    });
    const format = (c: string, size: number) => ({ path: `p/${c}/`, size_bytes: size, checksum: `sha256:${sha(c)}`, manifest: `p/${c}/manifest.json`, files: 2 });
    await completeRegistration(db, row.id, { artifacts: { 'gguf-q8_0': format('f', 500), safetensors: format('9', 2000) }, checksum: `sha256:${sha('9')}` });
    await transitionStage(db, { organizationId: 'dev', modelName: 'support-bot', version: 1, stage: 'production', actor: 'approver-ann', reason: 'gate report reviewed', requireGate: false });
  }, 120_000);
  afterAll(async () => {
    await catalogue?.close();
    await pg?.stop();
  });

  it('answers the chain from the dataset version and its parent to the approved stage in one call', async () => {
    const { status, body } = await call<ModelLineage>('/v1/models/support-bot/versions/1/lineage');
    expect(status).toBe(200);
    expect(body.dataset).toMatchObject({ id: datasetId, name: 'support', version: 1, sha256: sha('b') });
    expect(body.dataset!.parents.map((p) => [p.id, p.sha256])).toEqual([[parentId, sha('a')]]);
    expect(body.pipeline).toMatchObject({ id: 'pipe-1', stage: 'completed', outcome: 'promoted' });
    expect(body.jobs.map((j) => [j.id, j.type])).toEqual([['job-train', 'training'], ['job-eval', 'eval']]);
    expect(body.run).toMatchObject({ id: 'run-lineage', name: 'train-support', mlflow_path: '/mlflow/#/experiments/exp-lineage/runs/run-lineage' });
    // Checkpoints only (not the eval report), by step.
    expect(body.checkpoints.map((c) => [c.step, c.sha256])).toEqual([[15, sha('c')], [30, sha('d')]]);
    expect(body.formats.map((f) => f.name)).toEqual(['safetensors', 'gguf-q8_0']);
    expect(body.formats[1]).toMatchObject({ checksum: `sha256:${sha('f')}`, size_bytes: 500, files: 2 });
    expect(body.stages.map((s) => [s.stage, s.actor])).toEqual([['staging', 'dev'], ['production', 'approver-ann']]);
    expect(body.stages[1]).toMatchObject({ from: 'staging', reason: 'gate report reviewed' });
    expect(body.stage).toBe('production');
  });

  it("is 404 for another organization's version and for a version that does not exist", async () => {
    const theirs = await call<{ error_code: string }>('/v1/models/support-bot/versions/1/lineage', OTHER);
    expect(theirs.status).toBe(404);
    expect(JSON.stringify(theirs.body)).not.toContain('run-lineage');
    expect((await call('/v1/models/support-bot/versions/2/lineage')).status).toBe(404);
  });

  it('refuses a version that is not a positive integer, naming it', async () => {
    const bad = await call<{ message: string }>('/v1/models/support-bot/versions/latest/lineage');
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/invalid version "latest"/);
  });
});
