// The New fine-tune page's request, built from the API's own OpenAPI document as the page reads it: every setting's
// default is the contract's (the page restates none), an edit changes only its field, and the API's refusal of a
// bad setting comes back split by field. The browser flow itself is in console.test.ts.
import { describe, expect, it } from 'vitest';
import { openApiDocument } from '../api/openapi.js';
import { describeZodError } from '../api/errors.js';
import { expectedOf } from '../contracts/datasets.js';
import { PipelineInputSchema } from '../contracts/pipeline.js';
import { defaultOf, fieldErrors, fieldKind, sectionValue, shown, type JsonSchema } from '../console/src/schema-values.js';

type Doc = { paths: Record<string, Record<string, { requestBody: { content: Record<string, { schema: JsonSchema }> } }>> };
const doc = openApiDocument([{ method: 'POST', path: '/v1/pipelines', handler: () => undefined }] as never) as unknown as Doc;
const schema = doc.paths['/v1/pipelines']!.post!.requestBody.content['application/json']!.schema;
const minimal = { model_name: 'm', base_model: 'hanzo-tiny-llama', dataset: { name: 'd', version: 1 } };
const defaults = PipelineInputSchema.parse(minimal) as unknown as Record<string, Record<string, unknown>>;
/** The request's sections the page draws: every object setting of the schema. */
const sections = Object.entries(schema.properties!).filter(([, s]) => s.properties);

describe('the New fine-tune request, from the API document', () => {
  it("shows each field's default as the contract fills it in, required fields included", () => {
    expect(sections.map(([name]) => name)).toEqual(expect.arrayContaining(['hyperparameters', 'checkpoint', 'validate', 'data', 'hardware', 'eval', 'quantization', 'adalora', 'preference']));
    let compared = 0;
    for (const [name, section] of sections) {
      if (!defaults[name]) continue; // optional sections (quantization, adalora, preference) have no value until asked for
      for (const [field, s] of Object.entries(section.properties!)) {
        if (!fieldKind(s) || !(field in defaults[name]!)) continue;
        expect(shown(defaultOf(section, field)), `${name}.${field}`).toBe(shown(defaults[name]![field]));
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(40);
    expect(defaultOf(schema.properties!.hyperparameters!, 'learning_rate')).toBe(2e-3);
  });

  it('sends, with nothing edited, a request the API reads as its own defaults', () => {
    const req: Record<string, unknown> = { ...minimal };
    for (const [name, section] of sections) {
      const value = sectionValue(name, section, {});
      if (value) req[name] = value;
    }
    expect(req.quantization).toBeUndefined();
    expect(PipelineInputSchema.parse(req)).toEqual(defaults);
  });

  it('changes only the edited fields: numbers, lists, a nullable field emptied to null, a box unticked', () => {
    const edits = { 'hyperparameters.max_steps': '30', 'hyperparameters.target_modules': 'v_proj, q_proj', 'checkpoint.every_seconds': ' ', 'checkpoint.keep_best': false };
    const hp = sectionValue('hyperparameters', schema.properties!.hyperparameters!, edits);
    expect(hp).toEqual({ learning_rate: 2e-3, batch_size: 8, max_steps: 30, target_modules: ['v_proj', 'q_proj'] });
    const ckpt = sectionValue('checkpoint', schema.properties!.checkpoint!, edits);
    expect(ckpt).toEqual({ every_steps: 25, keep_last: 3, every_seconds: null, keep_best: false });
    const parsed = PipelineInputSchema.parse({ ...minimal, hyperparameters: hp, checkpoint: ckpt });
    expect(parsed.hyperparameters).toEqual({ ...defaults.hyperparameters, max_steps: 30, target_modules: ['v_proj', 'q_proj'] });
  });

  it("sends a non-number as typed, and splits the API's refusal by field", () => {
    const hp = sectionValue('hyperparameters', schema.properties!.hyperparameters!, { 'hyperparameters.max_steps': 'thirty', 'hyperparameters.learning_rate': '-1' });
    expect(hp).toMatchObject({ max_steps: 'thirty', learning_rate: -1 });
    const refused = PipelineInputSchema.safeParse({ ...minimal, hyperparameters: hp });
    expect(refused.success).toBe(false);
    const errors = fieldErrors(describeZodError(refused.error!));
    expect(errors.map((e) => e.field).sort()).toEqual(['hyperparameters.learning_rate', 'hyperparameters.max_steps']);
    expect(errors.every((e) => e.message.length > 0)).toBe(true);
    expect(fieldErrors('dataset: "d" has no version 2')).toEqual([{ field: 'dataset', message: '"d" has no version 2' }]);
    expect(fieldErrors('pipeline budget exceeded')).toEqual([{ field: null, message: 'pipeline budget exceeded' }]);
  });

  it("fills a refused upload's Expected column with what the message expects, parentheses balanced", () => {
    expect(expectedOf('required field is missing (expected string)')).toBe('string');
    expect(expectedOf('expected one of system, user, assistant, got "bot"')).toBe('one of system, user, assistant');
    expect(expectedOf('expected a Parquet file (starting PAR1), found bytes 0000')).toBe('a Parquet file (starting PAR1)');
    expect(expectedOf('invalid JSON: Unexpected token')).toBeNull();
  });
});
