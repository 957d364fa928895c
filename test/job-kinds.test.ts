// The eval and conversion sections of a job submission and the parent filter of the job list, as the contract
// checks them (no stack: the catalogue checks are test/job-kinds.e2e.test.ts's).
import { describe, expect, it } from 'vitest';
import { JobListQuerySchema, JobSubmissionSchema } from '../contracts/jobs.js';
import { jobKindOf } from '../contracts/job-kinds.js';

const issues = (raw: unknown): string[] => {
  const parsed = JobSubmissionSchema.safeParse(raw);
  return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};
const dataset = { name: 'ds' };

describe('job submission: eval and conversion sections', () => {
  it('accepts an eval of a model version and a conversion of a job, with their defaults', () => {
    const e = JobSubmissionSchema.parse({ type: 'eval', eval: { source: { model: 'support-bot@champion' }, dataset } });
    expect(e.eval).toMatchObject({ suite: 'support-desk@2', max_new_tokens: 12, dataset: { name: 'ds', version: 'latest' } });
    expect(jobKindOf(e)).toBe('eval');
    const c = JobSubmissionSchema.parse({ type: 'conversion', conversion: { source: { job: 'j1' }, dataset, register: { model_name: 'm' } } });
    expect(c.conversion).toMatchObject({ quantization: 'q8_0', validate: { max_perplexity: 15, perplexity_tolerance: 0.01 } });
    expect(jobKindOf(c)).toBe('conversion');
  });

  it('names the field of a bad section', () => {
    expect(issues({ type: 'conversion', conversion: { source: { job: 'j1' }, dataset, quantization: 'q2_k', register: { model_name: 'm' } } })).toEqual([expect.stringMatching(/^conversion\.quantization: /)]);
    expect(issues({ type: 'eval', eval: { source: {}, dataset } })).toEqual(['eval.source: give exactly one of model (name@version or name@alias) and job (a job id)']);
    expect(issues({ type: 'eval', eval: { source: { model: 'no-version' }, dataset } })).toEqual([expect.stringMatching(/^eval\.source\.model: expected name@version/)]);
    expect(issues({ type: 'training', eval: { source: { job: 'j' }, dataset } })).toEqual(['eval: an eval section goes with type: eval (this job is type: training)']);
    expect(issues({ type: 'eval', recipe: { base_model: 'b', dataset }, eval: { source: { job: 'j' }, dataset } })).toEqual(["recipe: an eval job runs the product's eval tool: give either eval or recipe"]);
    expect(issues({ type: 'eval', recipe: { base_model: 'b', dataset } })).toEqual(['type: a recipe job is a training job (for type: eval, give the eval section, or image and command)']);
  });

  it('lists by parent only in the <kind>:<id> form', () => {
    expect(JobListQuerySchema.parse({ parent: 'pipeline:abc-1' }).parent).toBe('pipeline:abc-1');
    expect(JobListQuerySchema.parse({ type: 'data_preparation' }).type).toBe('data_preparation');
    expect(JobListQuerySchema.safeParse({ parent: 'abc' }).success).toBe(false);
    expect(JobListQuerySchema.safeParse({ parent: 'run:abc' }).success).toBe(false);
  });
});
