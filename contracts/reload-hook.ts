// The promotion reload hook: what the serving layer receives whenever the production version changes
// (promotion.webhook_url): a pipeline's promotion, a manual stage change or `production` alias move, a rollback. The body is JSON; X-Hanzo-Signature is "sha256=" + hex HMAC-SHA256 over
// `${X-Hanzo-Timestamp}.${raw body}` keyed by promotion.webhook_secret, so a captured request cannot be replayed
// with a fresh timestamp. X-Hanzo-Event-Id is the same on every attempt: receivers deduplicate on it.
import { z } from 'zod';
import { ArtifactSchema } from './pipeline.js';

export const RELOAD_HEADERS = {
  signature: 'x-hanzo-signature',
  timestamp: 'x-hanzo-timestamp',
  eventId: 'x-hanzo-event-id',
} as const;

/** How far a receiver should let X-Hanzo-Timestamp drift from its own clock before refusing the request. */
export const RELOAD_TOLERANCE_SECONDS = 300;

export const ReloadHookBodySchema = z.strictObject({
  event: z.literal('model.promoted'),
  event_id: z.string().describe('equals X-Hanzo-Event-Id; stable across retries'),
  organization_id: z.string(),
  model: z.strictObject({
    name: z.string(),
    version: z.number().int().positive(),
    stage: z.literal('production'),
    archived_versions: z.array(z.number().int().positive()).describe('the versions this promotion moved out of production'),
  }),
  artifacts: z.record(z.string(), ArtifactSchema).describe('format ("safetensors", "gguf-q8_0") -> path, size and sha256 checksum'),
  pipeline_id: z.string().nullable().describe('the pipeline that promoted it; null: moved by hand (a stage change, an alias, a rollback)'),
  changed_by: z.string().optional().describe('who moved it: pipeline:<id>, or the user of a manual change'),
  rollback: z.boolean().optional().describe('true: the version is older than the production version it replaced'),
  promoted_at: z.string().describe('ISO-8601 time the promotion committed'),
});
export type ReloadHookBody = z.infer<typeof ReloadHookBodySchema>;
