// The pipeline workflow's own logic (stage order, eval gate, promotion by Update, timeout) on a real
// Temporal dev server. The activities are stand-ins here because this test is about orchestration; the
// real activities run in pipeline.e2e.test.ts.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection, WorkflowUpdateFailedError } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { mkdtempSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTemporalDevServer, type DevServer } from '../lib/temporal-dev-server.js';
import { bundleWorkflows } from '../workers/worker.js';
import { loadConfig } from '../lib/config.js';
import { checkpointWatchWorkflowId, jobsTaskQueueOf, pipelineWorkflowId, type PipelineWorkflowInput, type PipelineResult } from '../contracts/pipeline.js';
import { promotionDecisionUpdate, pipelineProgressQuery } from '../contracts/pipeline-messages.js';
import type { createActivities } from '../activities/index.js';
import { DataOptionsSchema, HardwareSchema, RecoveryPolicySchema } from '../contracts/trainer-job.js';

type Acts = ReturnType<typeof createActivities>;
const scores = (em: number) => ({ loss: 1, perplexity: 2.7, exact_match: em, num_examples: 10 });

function standInActivities(tunedExactMatch: number, stages: string[]): Partial<Record<keyof Acts, (...args: never[]) => Promise<unknown>>> {
  return {
    recordPipeline: async () => undefined,
    setPipelineStage: async (a: { stage: string }) => void stages.push(a.stage),
    prepareDataset: async () => ({ id: 'd', name: 'ds', version: 1, sha256: 'x', splits: { train: 't', validation: 'v', test: 's' } }),
    createTrackingRun: async () => ({ runId: 'run-1' }),
    watchCheckpoints: async () => ({ checkpoints: [{ step: 5, uri: 'file:///c', sha256: 'c' }] }),
    sweepCheckpoints: async () => ({ last_new_at: 0, alerted: false, poll_ms: 200 }),
    trainModel: async () => ({ steps: 10, resumed_from_step: null, steps_trained_this_process: 10, adapter_path: '/a', final_metrics: { 'train/loss': 0.5 }, tokens_seen: 100, job_uri: 'file:///jobs/w' }),
    evaluateModels: async () => ({ base: scores(0), tuned: scores(tunedExactMatch), samples: [] }),
    mergeAdapter: async () => ({ merged_dir: '/m', heldout_tokens_path: '/h', reference_perplexity: 3, num_tokens: 10, general_tokens_path: null, general_reference_perplexity: null, general_num_tokens: null, base_general_perplexity: null, files: [] }),
    validateAndQuantize: async () => ({ validate: {}, quantize: {}, gguf: { path: '/g.gguf', size_bytes: 1, sha256: 'g'.repeat(64), dtype: 'q8_0' } }),
    prepareModelRegistration: async () => ({
      version: 1,
      stage: tunedExactMatch > 0 ? 'staging' : 'none',
      gateReason: `exact_match tuned ${tunedExactMatch} vs base 0`,
      artifacts: {},
      status: 'pending_registration',
      message: null,
      registration: { version_id: 'v', organization_id: 'org', model_name: 'm', version: 1, formats: [], description: null, total_bytes: 0 },
    }),
    publishModelVersion: async () => ({ status: 'ready', message: null, artifacts: {}, checksum: null }),
    promoteModelVersion: async () => ({ archived: [] }),
    finishRun: async () => undefined,
  };
}

describe('fineTunePipelineWorkflow orchestration', () => {
  let server: DevServer;
  let client: Client;
  let bundle: Awaited<ReturnType<typeof bundleWorkflows>>;
  const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-wf-'));

  beforeAll(async () => {
    mkdirSync(join(home, 'logs'));
    const { bootstrap } = loadConfig({ HANZO_ML_HOME: home });
    server = await startTemporalDevServer({ binary: bootstrap.temporal, home, port: 0, uiPort: null, namespace: 'default' });
    client = new Client({ connection: await Connection.connect({ address: server.address }) });
    bundle = await bundleWorkflows();
  });
  afterAll(async () => {
    await client.connection.close();
    await server.stop();
  });

  async function run<T>(
    tunedExactMatch: number,
    body: (id: string, stages: string[]) => Promise<T>,
    promotion: PipelineWorkflowInput['promotion'] = { auto_approve: false },
    overrides: ReturnType<typeof standInActivities> = {},
  ): Promise<T> {
    const stages: string[] = [];
    const taskQueue = `wf-${randomUUID()}`;
    const connection = await NativeConnection.connect({ address: server.address });
    const activities = { ...standInActivities(tunedExactMatch, stages), ...overrides };
    const worker = await Worker.create({ connection, taskQueue, workflowBundle: bundle, activities });
    // Job activities run on the job task queue beside the workflow's.
    const jobs = await Worker.create({ connection, taskQueue: jobsTaskQueueOf(taskQueue), activities });
    const id = randomUUID();
    const input: PipelineWorkflowInput = {
      model_name: 'm',
      base_model: 'b',
      dataset: { name: 'ds', version: 'latest' },
      method: 'lora',
      hyperparameters: { learning_rate: 0.001, max_steps: 10, batch_size: 2, gradient_accumulation_steps: 1, warmup_steps: 0, weight_decay: 0, max_grad_norm: 1, lora_rank: 4, lora_alpha: 8, lora_dropout: 0, target_modules: ['q_proj'], max_seq_length: 64, seed: 1, gradient_checkpointing: false },
      checkpoint: { every_steps: 5, keep_last: 2, every_seconds: null, keep_best: false },
      data: DataOptionsSchema.parse({}),
      recovery: RecoveryPolicySchema.parse({}),
      hardware: HardwareSchema.parse({}),
      eval: { max_new_tokens: 4, suite: 'support-desk@1' },
      validate: { quantization: 'q8_0', perplexity_tolerance: 0.01, max_perplexity: 15, max_general_perplexity: 20, quantized_max_perplexity: 20, test_prompts: ['hi'] },
      promotion,
      organization_id: 'org',
      requested_by: 'tester',
      runtime: { heartbeat_timeout: '30s', approval_timeout: '1h', reload_deadline: '1h' },
    };
    return jobs.runUntil(
      worker.runUntil(async () => {
        await client.workflow.start('fineTunePipelineWorkflow', { taskQueue, workflowId: pipelineWorkflowId(id), args: [input] });
        return body(id, stages);
      }),
    );
  }

  const awaitingApproval = async (id: string) => {
    const h = client.workflow.getHandle(pipelineWorkflowId(id));
    for (let i = 0; i < 200; i++) {
      if ((await h.query(pipelineProgressQuery)).awaiting_approval) return h;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('never awaited approval');
  };

  it('runs the stages in order and promotes on an approving Update', async () => {
    const result = await run(0.9, async (id, stages) => {
      const h = await awaitingApproval(id);
      const ack = await h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'approve', approver: 'alice', reason: 'looks good' }] });
      expect(ack.decision?.approver).toBe('alice');
      const r = (await h.result()) as PipelineResult;
      expect(stages).toEqual(['preprocess', 'train', 'eval', 'validate', 'register', 'promote', 'completed']);
      return r;
    });
    expect(result.outcome).toBe('promoted');
    expect(result.progress.model_version).toEqual({ name: 'm', version: 1, stage: 'production' });
  });

  it('keeps the version in staging when rejected, and refuses a second decision', async () => {
    const result = await run(0.9, async (id) => {
      const h = await awaitingApproval(id);
      await h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'reject', approver: 'bob', reason: 'not yet' }] });
      await expect(h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'approve', approver: 'eve', reason: 'x' }] })).rejects.toBeInstanceOf(WorkflowUpdateFailedError);
      return (await h.result()) as PipelineResult;
    });
    expect(result.outcome).toBe('rejected');
    expect(result.reason).toContain('bob');
    expect(result.progress.model_version?.stage).toBe('staging');
  });

  it('rejects a malformed decision in the Update validator without recording it', async () => {
    await run(0.9, async (id) => {
      const h = await awaitingApproval(id);
      await expect(h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'maybe', approver: '', reason: '' } as never] })).rejects.toSatisfy((e: Error) => /invalid decision: decision/.test(String((e.cause as Error).message)));
      expect((await h.query(pipelineProgressQuery)).decision).toBeNull();
      await h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'approve', approver: 'a', reason: 'ok' }] });
      return h.result();
    });
  });

  it('holds a version whose gate was inconclusive for a human even when the pipeline asked for auto-approval', async () => {
    const gate = (verdict: 'pass' | 'inconclusive') => ({
      suite: 'support-desk@3',
      passed: verdict === 'pass',
      verdict,
      reason: verdict === 'pass' ? 'no regression beyond the limits' : 'inconclusive, held for a human: retention/perplexity vs base: ...',
      confidence: 0.95,
      resamples: 1000,
      comparisons: [],
      production_version: null,
      skipped: ['production'],
    });
    const withGate = (verdict: 'pass' | 'inconclusive') => ({ evaluateModels: async () => ({ base: scores(0), tuned: scores(0.9), samples: [], gate: gate(verdict) }) });
    const held = await run(
      0.9,
      async (id) => {
        const h = await awaitingApproval(id);
        await h.executeUpdate(promotionDecisionUpdate, { args: [{ decision: 'approve', approver: 'carol', reason: 'retention interval acceptable' }] });
        return (await h.result()) as PipelineResult;
      },
      { auto_approve: true },
      withGate('inconclusive'),
    );
    expect(held).toMatchObject({ outcome: 'promoted', reason: 'approved by carol: retention interval acceptable' });
    // The same pipeline with a passing gate approves itself.
    const auto = (await run(0.9, async (id) => client.workflow.getHandle(pipelineWorkflowId(id)).result(), { auto_approve: true }, withGate('pass'))) as PipelineResult;
    expect(auto).toMatchObject({ outcome: 'promoted', reason: 'auto_approve set on the pipeline' });
  });

  it('ends with approval_timed_out when nobody decides within the timeout', async () => {
    const result = (await run(0.9, async (id) => client.workflow.getHandle(pipelineWorkflowId(id)).result(), { auto_approve: false, approval_timeout: '2s' })) as PipelineResult;
    expect(result.outcome).toBe('approval_timed_out');
  });

  it('watches checkpoints from a child workflow on timers while training runs, with no activity waiting beside the training job', async () => {
    let finishTraining!: () => void;
    const training = new Promise<void>((r) => (finishTraining = r));
    let passes = 0;
    const runId = randomUUID();
    const trained = { steps: 10, resumed_from_step: null, steps_trained_this_process: 10, adapter_path: '/a', final_metrics: { 'train/loss': 0.5 }, tokens_seen: 100, job_uri: 'file:///jobs/w' };
    const overrides = {
      createTrackingRun: async () => ({ runId }),
      trainModel: async () => training.then(() => trained),
      sweepCheckpoints: async () => {
        passes++;
        return { last_new_at: 0, alerted: false, poll_ms: 200 };
      },
    };
    const result = await run(
      0.9,
      async (id) => {
        const pipeline = client.workflow.getHandle(pipelineWorkflowId(id));
        const watcher = client.workflow.getHandle(checkpointWatchWorkflowId(runId));
        for (let i = 0; passes < 3; i++) {
          if (i > 200) throw new Error(`the watcher made ${passes} passes`);
          await new Promise((r) => setTimeout(r, 100));
        }
        // Between passes the watcher waits on a timer: the only activity in flight is the training job itself.
        const described = await pipeline.describe();
        expect(described.raw.pendingActivities!.map((a) => a.activityType!.name)).toEqual(['trainModel']);
        expect(described.raw.pendingChildren!.map((c) => c.workflowId)).toEqual([checkpointWatchWorkflowId(runId)]);
        expect((await watcher.describe()).status.name).toBe('RUNNING');
        finishTraining();
        const r = (await pipeline.result()) as PipelineResult;
        // Training over, the watcher was cancelled and stopped; the final sweep's checkpoints are the pipeline's.
        expect((await watcher.describe()).status.name).not.toBe('RUNNING');
        return r;
      },
      { auto_approve: true },
      overrides,
    );
    expect(result.outcome).toBe('promoted');
    expect(result.progress.checkpoints).toEqual([{ step: 5, uri: 'file:///c', sha256: 'c' }]);
  });

  it('stops after register with the reason when the eval gate fails', async () => {
    const result = (await run(0, async (id) => client.workflow.getHandle(pipelineWorkflowId(id)).result())) as PipelineResult;
    expect(result.outcome).toBe('gate_failed');
    expect(result.reason).toContain('exact_match');
    expect(result.progress.stage).toBe('completed');
  });
});
