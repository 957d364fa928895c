// A pipeline worker for tests about what happens at and after promotion: the pipeline's own workflow, the real
// catalogue, registry and reload-hook activities, and stand-ins for the stages before register (training a model
// is not what these tests are about; pipeline.e2e.test.ts runs those for real). Runs in the test process, or as
// its own process (promotion-worker-main.ts) that a test can kill.
import { NativeConnection, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { jobsTaskQueueOf, type Artifact } from '../../contracts/pipeline.js';
import { createActivities } from '../../activities/index.js';
import type { ActivityDeps } from '../../activities/deps.js';
import { openCatalogue, type Catalogue } from '../../db/client.js';
import { registerModelVersion } from '../../db/repo/models.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { createObjectStore } from '../../lib/object-store.js';
import { createExecutor } from '../../jobs/executor/factory.js';
import { workflowsPath } from '../../workers/worker.js';

const sha = (c: string) => `sha256:${c.repeat(64)}`;
/** The artifacts a registered version carries: one per format, each with its checksum. */
export const ARTIFACTS: Record<string, Artifact> = {
  safetensors: { path: 'file:///models/m/safetensors/', size_bytes: 1000, checksum: sha('a') },
  'gguf-q8_0': { path: 'file:///models/m/gguf-q8_0/model.gguf', size_bytes: 500, checksum: sha('b') },
};

/** The decision of record a pipeline's register stage leaves on a version that passed its suite. */
export const PASSED_GATE = { suite: 'support-desk@1', passed: true, verdict: 'pass', reason: 'passed', confidence: 0.95, resamples: 1000, comparisons: [], production_version: null, skipped: [] };

const scores = (em: number) => ({ loss: 1, perplexity: 2.7, exact_match: em, num_examples: 10 });

/** Stand-ins for preprocess..validate; register writes a real staging version to the catalogue. */
function earlyStages(deps: ActivityDeps) {
  return {
    prepareDataset: async () => ({ id: 'd', name: 'ds', version: 1, sha256: 'x', splits: { train: 't', validation: 'v', test: 's' } }),
    createTrackingRun: async () => ({ runId: 'run-1' }),
    watchCheckpoints: async () => ({ checkpoints: [] }),
    sweepCheckpoints: async () => ({ last_new_at: 0, alerted: false, poll_ms: 1000 }),
    trainModel: async () => ({ steps: 10, resumed_from_step: null, steps_trained_this_process: 10, adapter_path: '/a', final_metrics: {}, tokens_seen: 100, job_uri: 'file:///jobs/w' }),
    evaluateModels: async () => ({ base: scores(0), tuned: scores(0.9), samples: [] }),
    mergeAdapter: async () => ({ merged_dir: '/m', heldout_tokens_path: '/h', reference_perplexity: 3, num_tokens: 10, general_tokens_path: null, general_reference_perplexity: null, general_num_tokens: null, base_general_perplexity: null, files: [] }),
    validateAndQuantize: async () => ({ validate: {}, quantize: {}, gguf: { path: '/g.gguf', size_bytes: 1, sha256: 'g'.repeat(64), dtype: 'q8_0' } }),
    registerModelVersion: async (a: { pipelineId: string; input: { organization_id: string; model_name: string } }) => {
      const row = await registerModelVersion(deps.db, { organizationId: a.input.organization_id, modelName: a.input.model_name, stage: 'staging', artifacts: ARTIFACTS, metrics: { gate: PASSED_GATE }, createdBy: 'pipeline', sourcePipeline: a.pipelineId });
      return { version: row.version, stage: row.stage, gateReason: 'passed', artifacts: ARTIFACTS };
    },
    // The version is ready at once: nothing is left for the copy activity.
    prepareModelRegistration: async (a: { pipelineId: string; input: { organization_id: string; model_name: string } }) => {
      const row = await registerModelVersion(deps.db, { organizationId: a.input.organization_id, modelName: a.input.model_name, stage: 'staging', artifacts: ARTIFACTS, metrics: { gate: PASSED_GATE }, createdBy: 'pipeline', sourcePipeline: a.pipelineId });
      return { version: row.version, stage: row.stage, gateReason: 'passed', artifacts: ARTIFACTS, registration: null, status: row.status, message: null };
    },
    finishRun: async () => undefined,
  };
}

export interface PromotionWorker {
  catalogue: Catalogue;
  running: Promise<void>;
  stop(): Promise<void>;
}

/** env: HANZO_ML_* settings (database URL, promotion.webhook_*); the workers poll taskQueue and its job queue. */
export async function startPromotionWorker(o: { env: Record<string, string>; temporalAddress: string; taskQueue: string; bundle?: WorkflowBundleWithSourceMap }): Promise<PromotionWorker> {
  const { config, home, bootstrap } = loadConfig({ HANZO_ML_LOGGING_LEVEL: 'warn', ...o.env });
  const log = createLogger(config.logging);
  const catalogue = await openCatalogue({ url: config.database.url });
  const deps: ActivityDeps = {
    db: catalogue.db,
    store: await createObjectStore(config.storage, home),
    config,
    home,
    bootstrap,
    executor: createExecutor({ config, home, bootstrap }, log),
    log,
    trackingUri: 'http://127.0.0.1:1',
    jobSecrets: async () => ({}),
  };
  const activities = { ...createActivities(deps), ...earlyStages(deps) };
  const connection = await NativeConnection.connect({ address: o.temporalAddress });
  const code = o.bundle ? { workflowBundle: o.bundle } : { workflowsPath };
  const workers = [
    await Worker.create({ connection, taskQueue: o.taskQueue, ...code, activities, shutdownGraceTime: '1s' }),
    await Worker.create({ connection, taskQueue: jobsTaskQueueOf(o.taskQueue), activities, shutdownGraceTime: '1s' }),
  ];
  const running = Promise.all(workers.map((w) => w.run())).then(() => undefined);
  return {
    catalogue,
    running,
    async stop() {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
      await running;
      await connection.close();
      await catalogue.close();
    },
  };
}
