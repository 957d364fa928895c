// defineJob, the one way activities describe a job: the envelope it builds is the one a hand-written definition
// wrote before (so the job reads the same envelope.json and the executor gets the same request), its node and
// process counts follow its resources, and a bad envelope fails for good naming its field.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { prepareAttempt } from '../jobs/attempts.js';
import { defineJob, jobResources, type JobDefinition, type JobDescription } from '../jobs/definition.js';
import type { JobDeps } from '../jobs/deps.js';
import { FileObjectStore } from '../lib/object-store.js';
import { testConfig } from './support/config.js';

const base = 'file:///models/base';
const train = 'file:///data/train.jsonl';
const checkpoints = 'file:///checkpoints/dev/run-1';

const trainDescription: JobDescription = {
  name: 'pipe-1-train',
  kind: 'train',
  organizationId: 'dev',
  runId: 'run-1',
  priority: 'high',
  tool: 'trainer',
  spec: { kind: 'train', job_name: 'pipe-1-train', output_dir: 'output:output_dir' },
  inputs: { base_model_path: { uri: base, kind: 'dir' }, train_path: { uri: train, kind: 'file' } },
  outputs: { output_dir: 'dir' },
  checkpoints: { field: 'checkpoint_dir', uri: checkpoints },
  resources: { nodes: 2, processes: 4, gpus_per_node: 4, gpu_type: 'h100', image: null },
};

/** The same train job as activities/training.ts wrote it by hand before defineJob. */
const handWritten: JobDefinition = {
  name: 'pipe-1-train',
  kind: 'train',
  organizationId: 'dev',
  runId: 'run-1',
  priority: 'high',
  envelope: {
    tool: 'trainer',
    spec: { kind: 'train', job_name: 'pipe-1-train', output_dir: 'output:output_dir' },
    inputs: { base_model_path: { uri: base, kind: 'dir' }, train_path: { uri: train, kind: 'file' } },
    outputs: { output_dir: 'dir' },
    checkpoints: { field: 'checkpoint_dir', uri: checkpoints },
    processes: 4,
    num_nodes: 2,
  },
  resources: { nodes: 2, processes: 4, gpus_per_node: 4, gpu_type: 'h100', image: null },
};

/** Preparing an attempt reads only the store, the configuration and the secrets: the rest is not needed here. */
function preparationDeps(): JobDeps {
  const loaded = testConfig();
  const store = new FileObjectStore(mkdtempSync(join(tmpdir(), 'hanzo-ml-definition-')));
  return { store, config: loaded.config, jobSecrets: async () => ({ HANZO_ML_TRACKING_TOKEN: 't' }) } as Partial<JobDeps> as JobDeps;
}

function failureOf(run: () => unknown): ApplicationFailure {
  try {
    run();
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected an ApplicationFailure');
}

describe('defineJob', () => {
  it('gives the envelope the node and process counts of the resources', () => {
    const job = defineJob(trainDescription);
    expect(job.envelope.num_nodes).toBe(2);
    expect(job.envelope.processes).toBe(4);
    expect(jobResources(job)).toEqual({ nodes: 2, processes: 4, gpus_per_node: 4, gpu_type: 'h100', image: null, cpu: null, memory: null });
    expect(job).toMatchObject({ runId: 'run-1', priority: 'high', kind: 'train', organizationId: 'dev' });
  });

  it('writes the envelope and makes the request a hand-written definition of the same job did', async () => {
    const deps = preparationDeps();
    const defined = await prepareAttempt(deps, defineJob(trainDescription), []);
    const written = await defined.files.readEnvelope();
    const other = await prepareAttempt(preparationDeps(), handWritten, []);
    expect(written).toEqual({ ...(await other.files.readEnvelope()), job_uri: written!.job_uri });
    expect({ ...defined.request, envelopeUri: null }).toEqual({ ...other.request, envelopeUri: null });
  });

  it('runs a job given no resources as one process on one node, and keeps its result field and arguments', () => {
    const job = defineJob({ name: 'pipe-1-candle-validate', kind: 'candle', organizationId: 'dev', tool: 'candle', spec: {}, args: ['validate', '--json'], resultField: 'report_path', outputs: { report_path: 'file' } });
    expect(job.envelope).toMatchObject({ num_nodes: 1, processes: 1, args: ['validate', '--json'], result_field: 'report_path' });
    expect(job.resources).toBeUndefined();
    expect(jobResources(job)).toMatchObject({ nodes: 1, processes: 1, gpus_per_node: 0 });
  });

  it('refuses a bad envelope for good, naming the field', () => {
    const badKind = failureOf(() => defineJob({ ...trainDescription, inputs: { train_path: { uri: train, kind: 'folder' as 'dir' } } }));
    expect(badKind.type).toBe('BadJobSpec');
    expect(badKind.nonRetryable).toBe(true);
    expect(badKind.message).toMatch(/^job pipe-1-train: envelope\.inputs\.train_path\.kind: /);
    const noNodes = failureOf(() => defineJob({ ...trainDescription, resources: { nodes: 0 } }));
    expect(noNodes.message).toMatch(/^job pipe-1-train: resources\.nodes: /);
  });
});
