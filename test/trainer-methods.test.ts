// The fine-tuning method is part of the contracts: a train job spec names any of the six methods with its own
// settings, and a pipeline picks any method that ends in an adapter (what its merge and eval stages take).
import { describe, expect, it } from 'vitest';
import { PipelineInputSchema } from '../contracts/pipeline.js';
import { TRAIN_METHODS, TrainJobSpecSchema } from '../contracts/trainer-job.js';

const job = {
  kind: 'train',
  job_name: 'j',
  run_id: 'r',
  tracking_uri: null,
  base_model_path: '/models/base',
  train_path: '/data/train.jsonl',
  validation_path: null,
  output_dir: '/run/output',
  checkpoint_dir: '/run/checkpoints',
  hyperparameters: { learning_rate: 1e-3, max_steps: 10, batch_size: 2 },
  checkpoint: { every_steps: 5, keep_last: 2 },
};
const pipeline = { model_name: 'm', base_model: 'hanzo-tiny-llama', dataset: { name: 'd' } };

describe('training methods in the contracts', () => {
  it('accepts every method in a train job spec and fills the data and hardware defaults', () => {
    for (const method of TRAIN_METHODS) {
      const spec = TrainJobSpecSchema.parse({ ...job, method });
      expect(spec.method).toBe(method);
      expect(spec.data).toEqual({ chat_template: 'model', mask_prompt: true, packing: false });
      expect(spec.hardware).toMatchObject({ device: 'auto', nodes: 1, gpus_per_node: 0 });
    }
  });

  it('fills method-specific defaults and rejects out-of-range settings naming the field', () => {
    const spec = TrainJobSpecSchema.parse({ ...job, method: 'qlora', quantization: {} });
    expect(spec.quantization).toEqual({ quant_type: 'nf4', double_quant: true, compute_dtype: 'bfloat16' });
    const bad = TrainJobSpecSchema.safeParse({ ...job, method: 'adalora', adalora: { beta1: 1 } });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['adalora', 'beta1']);
    expect(TrainJobSpecSchema.safeParse({ ...job, method: 'sft' }).success).toBe(false);
  });

  it('lets a pipeline choose an adapter method with its settings, defaulting to lora', () => {
    expect(PipelineInputSchema.parse(pipeline).method).toBe('lora');
    const dpo = PipelineInputSchema.parse({ ...pipeline, method: 'dpo', preference: { beta: 0.2 } });
    expect(dpo.preference).toEqual({ beta: 0.2, loss_type: 'sigmoid' });
  });

  it('refuses full fine-tuning in a pipeline, whose merge stage needs an adapter', () => {
    const result = PipelineInputSchema.safeParse({ ...pipeline, method: 'full' });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(['method']);
  });
});
