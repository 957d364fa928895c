// POST /v1/estimates/memory: what a fine-tune needs of one GPU, answered by the trainer's own estimator
// (trainer/hanzo_ml/memory.py, the numbers the trainer checks a job against before it loads a weight), with the
// verdict for the chosen GPU. The trainer's Python runs as for dataset preparation (trainerPython): one short
// process per call, which imports the torch-free estimator alone.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Hono } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { GPU_MEMORY_GB, MemoryEstimateRequestSchema, type MemoryEstimate, type MemoryEstimateRequest } from '../../contracts/console.js';
import { BaseModelError, resolveBaseModel } from '../../lib/base-models.js';
import { repoRoot, trainerPython } from '../../lib/config.js';
import { requireRole } from '../auth.js';
import { invalid } from '../errors.js';
import { jsonBody } from '../validate.js';

const execFileAsync = promisify(execFile);
const GIB = 2 ** 30;

/**
 * The estimator's call: the spec's fields it reads, as attributes, and the shape of the model (a known
 * architecture or a model directory's config.json). An unknown model is the trainer's InputError, answered as
 * {"error"}; anything else is a failure of the helper itself.
 */
const ESTIMATOR = `
import json, sys
from types import SimpleNamespace
from hanzo_ml.errors import InputError
from hanzo_ml.memory import KNOWN_SHAPES, estimate, shape_of

def ns(value):
    return SimpleNamespace(**{k: ns(v) for k, v in value.items()}) if isinstance(value, dict) else value

request = json.load(sys.stdin)
model = request["model"]
try:
    if model["name"] in KNOWN_SHAPES:
        shape = KNOWN_SHAPES[model["name"]]
    elif model["directory"]:
        shape = shape_of(model["directory"])
    else:
        raise InputError(model["unresolved"])
except InputError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
print(json.dumps(estimate(ns(request["spec"]), request["device_memory_bytes"], shape).as_dict()))
`;

interface TrainerEstimate {
  weights: number;
  adapter: number;
  gradients: number;
  optimizer: number;
  activations: number;
  overhead: number;
  total: number;
  devices: number;
  trainable_params: number;
  max_micro_batch: number | null;
  tokens: number;
}

/**
 * The model the estimator sizes: its name (an architecture the estimator knows, hanzo_ml.memory.KNOWN_SHAPES) and
 * the base model directory of that name, or why there is none (said only when the estimator does not know the name).
 */
function modelOf(deps: ApiDeps, name: string): { name: string; directory: string | null; unresolved: string | null } {
  if (name.startsWith('/')) throw invalid(`base_model: "${name}": give a base model's name, not a path`);
  try {
    return { name, directory: resolveBaseModel(name, deps.config, deps.bootstrap), unresolved: null };
  } catch (err) {
    if (err instanceof BaseModelError) return { name, directory: null, unresolved: err.message };
    throw err;
  }
}

/** The train spec's fields the estimator reads, from the request (a GPU job: device cuda, one process per GPU). */
function specOf(r: MemoryEstimateRequest) {
  return {
    method: r.method,
    hyperparameters: r.hyperparameters,
    hardware: {
      device: 'cuda',
      nodes: r.gpu.nodes,
      gpus_per_node: r.gpu.count,
      processes: r.gpu.count,
      strategy: r.gpu.strategy,
      precision: r.gpu.precision,
      attention: 'auto',
      peak_flops_per_device: null,
      price_per_device_hour_usd: null,
    },
    data: r.data,
    ...(r.quantization ? { quantization: r.quantization } : {}),
  };
}

const gib = (bytes: number) => `${(bytes / GIB).toFixed(1)} GiB`;

function verdictOf(e: TrainerEstimate, device: number, batch: number, gpu: string): string {
  if (e.total <= device) return `fits: ${gib(e.total)} of ${gpu}'s ${gib(device)} per device at batch_size ${batch}`;
  if (e.max_micro_batch) return `does not fit at batch_size ${batch} (${gib(e.total)} of ${gib(device)}); micro-batches of ${e.max_micro_batch} fit, the rest accumulated`;
  return `does not fit: ${gib(e.total)} needed at batch_size ${batch}, ${gpu} has ${gib(device)}; not even one example fits: use more GPUs with fsdp, qlora, gradient checkpointing or a shorter max_seq_length`;
}

export function estimateRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.post('/memory', async (c) => {
    requireRole(c, 'viewer');
    const body = await jsonBody(c, MemoryEstimateRequestSchema);
    const model = modelOf(deps, body.base_model);
    const memoryGib = body.gpu.memory_gb ?? GPU_MEMORY_GB[body.gpu.name!];
    const device = Math.floor(memoryGib * GIB);
    const out = await runEstimator(deps, { model, spec: specOf(body), device_memory_bytes: device });
    if ('error' in out) throw invalid(`base_model: ${out.error}`);
    const answer: MemoryEstimate = {
      breakdown: { weights: out.weights, adapter: out.adapter, gradients: out.gradients, optimizer: out.optimizer, activations: out.activations, overhead: out.overhead },
      total_bytes: out.total,
      device_memory_bytes: device,
      devices: out.devices,
      trainable_params: out.trainable_params,
      max_micro_batch: out.max_micro_batch ?? 0,
      tokens: out.tokens,
      fits: out.total <= device,
      verdict: verdictOf(out, device, body.hyperparameters.batch_size, body.gpu.name ?? `a ${memoryGib} GiB GPU`),
    };
    return c.json(answer);
  });

  return app;
}

/** One run of the trainer's estimator: the request on stdin, its JSON answer on stdout. */
async function runEstimator(deps: ApiDeps, request: unknown): Promise<TrainerEstimate | { error: string }> {
  const run = execFileAsync(trainerPython(deps), ['-c', ESTIMATOR], {
    // Not this process's environment: the estimator needs none of the API's secrets.
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? deps.home, PYTHONPATH: join(repoRoot, 'trainer') },
    timeout: 30_000,
    maxBuffer: 1 << 20,
  });
  run.child.stdin!.end(JSON.stringify(request));
  const { stdout } = await run;
  return JSON.parse(stdout) as TrainerEstimate | { error: string };
}
