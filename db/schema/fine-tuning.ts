import { integer, jsonb, pgTable, text } from 'drizzle-orm/pg-core';
import { jobs } from './jobs.js';

/**
 * What a job created through /v1/fine_tuning/jobs was asked with, in OpenAI's terms (the job itself is a row of
 * `jobs`, run like any recipe job): answered back as the fine-tuning job's fields.
 */
export const fineTuningJobs = pgTable('fine_tuning_jobs', {
  jobId: text('job_id')
    .primaryKey()
    .references(() => jobs.id),
  trainingFile: text('training_file').notNull(),
  validationFile: text('validation_file'),
  model: text('model').notNull(),
  suffix: text('suffix'),
  seed: integer('seed').notNull(),
  /** n_epochs, batch_size, learning_rate_multiplier as resolved (numbers, never "auto") */
  hyperparameters: jsonb('hyperparameters').notNull(),
  method: jsonb('method').notNull(),
  metadata: jsonb('metadata'),
});
