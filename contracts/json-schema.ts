import { z } from 'zod';
import {
  TrainerJobSpecSchema,
  TrainProgressSchema,
  CheckpointManifestSchema,
  TrainResultSchema,
  EvalReportSchema,
  MergeReportSchema,
  TokenCountReportSchema,
} from './trainer-job.js';
import { PrepareReportSchema } from './data-prep.js';
import { CandleReportSchema } from './candle-report.js';
import { JobEnvelopeSchema } from './job-io.js';

const render = (schema: z.ZodType): string => JSON.stringify(z.toJSONSchema(schema, { io: 'input' }), null, 2) + '\n';

/** file name -> JSON Schema text, for every shape that crosses into Python or Rust. */
export function generatedSchemas(): Record<string, string> {
  return {
    'trainer-job.schema.json': render(TrainerJobSpecSchema),
    'train-progress.schema.json': render(TrainProgressSchema),
    'checkpoint-manifest.schema.json': render(CheckpointManifestSchema),
    'train-result.schema.json': render(TrainResultSchema),
    'eval-report.schema.json': render(EvalReportSchema),
    'merge-report.schema.json': render(MergeReportSchema),
    'token-count-report.schema.json': render(TokenCountReportSchema),
    'prepare-report.schema.json': render(PrepareReportSchema),
    'candle-report.schema.json': render(CandleReportSchema),
    'job-envelope.schema.json': render(JobEnvelopeSchema),
  };
}
