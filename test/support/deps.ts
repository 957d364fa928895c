// Activity dependencies for tests that call activities directly, outside a worker.
import { join } from 'node:path';
import type { ActivityDeps } from '../../activities/deps.js';
import { LocalExecutor } from '../../jobs/executor/local.js';
import { localJobEnvironment } from '../../jobs/environment.js';
import { defineJob, type JobDefinition } from '../../jobs/definition.js';
import { pathToFileURL } from 'node:url';
import type { Db } from '../../db/client.js';
import type { LoadedConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { FileObjectStore } from '../../lib/object-store.js';

/** File objects under `home`, the local executor, quiet logs, and a tracking URL nothing listens on. */
export function offlineActivityDeps(db: Db, loaded: Pick<LoadedConfig, 'config' | 'bootstrap'>, home: string): ActivityDeps {
  return {
    db,
    store: new FileObjectStore(join(home, 'objects')),
    config: loaded.config,
    home,
    bootstrap: loaded.bootstrap,
    executor: new LocalExecutor({ workRoot: join(home, 'work', 'jobs'), python: loaded.bootstrap.python, env: localJobEnvironment(loaded) }),
    log: createLogger({ level: 'error', format: 'text' }),
    trackingUri: 'http://127.0.0.1:1',
    jobSecrets: async () => ({ HANZO_ML_TRACKING_TOKEN: 't' }),
  };
}

/** A train job of the bundled base model whose spec's input, output and checkpoint fields the job runner fills. */
export function trainJobDefinition(p: { name: string; spec: Record<string, unknown>; baseModel: string; trainUri: string; checkpointsUri: string; nodes?: number }): JobDefinition {
  return defineJob({
    name: p.name,
    kind: 'train',
    organizationId: 'dev',
    tool: 'trainer',
    spec: { ...p.spec, job_name: p.name, base_model_path: 'input:base_model_path', train_path: 'input:train_path', output_dir: 'output:output_dir', checkpoint_dir: 'checkpoints:checkpoint_dir' },
    // A path (pods that share this machine's files) or a URI (the object store, as pods of a cluster read it).
    inputs: { base_model_path: { uri: p.baseModel.includes('://') ? p.baseModel : pathToFileURL(p.baseModel).href, kind: 'dir' }, train_path: { uri: p.trainUri, kind: 'file' } },
    outputs: { output_dir: 'dir' },
    checkpoints: { field: 'checkpoint_dir', uri: p.checkpointsUri },
    resources: { nodes: p.nodes ?? 1, processes: 1, gpus_per_node: p.nodes && p.nodes > 1 ? 1 : 0 },
  });
}
