// The event stream of spec 000 ("Integration with Hanzo Stream"): one envelope, one payload schema per topic.
// Events are written to the outbox in the transaction of the change they describe; the relay publishes them to
// Kafka topics `{stream.topic_prefix}.{topic}` keyed per resource (order holds per key), and GET /v1/events
// streams the same envelopes as server-sent events. Delivery is at least once: deduplicate on `event_id`.
import { z } from 'zod';

export const EVENT_TOPICS = ['jobs', 'metrics', 'models', 'gpu', 'datasets', 'pipelines', 'audit'] as const;
export type EventTopic = (typeof EVENT_TOPICS)[number];

const at = z.string().describe('ISO-8601 time the change committed');

export const JobEventSchema = z.discriminatedUnion('event', [
  z.looseObject({ event: z.literal('job.submitted'), job_id: z.string(), user_id: z.string(), type: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('job.started'), job_id: z.string(), timestamp: at }),
  z.looseObject({
    event: z.literal('job.completed'),
    job_id: z.string(),
    type: z.string(),
    duration_seconds: z.number().nonnegative().optional(),
    gpu_hours: z.number().nonnegative().optional().describe('device-hours; gpu_type "cpu" for a CPU job'),
    gpu_type: z.string().optional(),
    timestamp: at,
  }),
  z.looseObject({ event: z.literal('job.failed'), job_id: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('job.cancelled'), job_id: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('job.preempted'), job_id: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('job.paused'), job_id: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('job.resumed'), job_id: z.string(), timestamp: at }),
  z.looseObject({ event: z.literal('checkpoint.stale'), job_id: z.string(), run_id: z.string(), seconds_since_last_checkpoint: z.number(), timestamp: at }),
  z.looseObject({ event: z.literal('checkpoint.corrupt'), job_id: z.string(), run_id: z.string(), checkpoint: z.string(), message: z.string(), timestamp: at }),
  z.looseObject({ event: z.enum(['training.recovering', 'training.diverged', 'training.failed']), job_id: z.string(), run_id: z.string(), timestamp: at }),
]);

export const MetricEventSchema = z.looseObject({
  run_id: z.string(),
  step: z.number().int(),
  metrics: z.record(z.string(), z.number().nullable()).describe('null for NaN'),
  timestamp: at,
});

export const ModelEventSchema = z.discriminatedUnion('event', [
  z.looseObject({ event: z.literal('model.registered'), name: z.string(), version: z.number().int(), run_id: z.string().nullable().optional(), timestamp: at }),
  z.looseObject({ event: z.literal('model.promoted'), name: z.string(), version: z.number().int(), stage: z.string(), timestamp: at }),
  // The reload hook (promotion.webhook_url) after a promotion to production: answered 2xx, or not within the deadline.
  z.looseObject({
    event: z.literal('model.reload_notified'),
    name: z.string(),
    version: z.number().int(),
    pipeline_id: z.string().nullable(),
    hook_event_id: z.string().describe('the X-Hanzo-Event-Id the receiver saw'),
    attempts: z.number().int().positive(),
    timestamp: at,
  }),
  z.looseObject({
    event: z.literal('model.reload_failed'),
    name: z.string(),
    version: z.number().int(),
    pipeline_id: z.string().nullable(),
    hook_event_id: z.string(),
    error: z.string(),
    timestamp: at,
  }),
]);

export const GpuEventSchema = z.looseObject({
  node_id: z.string(),
  gpu_id: z.string(),
  utilization: z.number(),
  memory_used: z.number(),
  temperature: z.number(),
  timestamp: at,
});

export const DatasetEventSchema = z.looseObject({ event: z.literal('dataset.created'), timestamp: at });
export const PipelineEventSchema = z.looseObject({ event: z.literal('pipeline.stage'), pipeline_id: z.string(), stage: z.string(), outcome: z.string().nullable(), timestamp: at });

/** One audit row: who did what to which resource, and how it ended. */
export const AuditEventSchema = z.looseObject({
  event: z.literal('audit'),
  actor: z.string(),
  action: z.string(),
  resource: z.string(),
  outcome: z.enum(['ok', 'denied', 'failed']),
  request_id: z.string().nullable(),
  source_address: z.string().nullable(),
  timestamp: at,
});

export const PAYLOAD_SCHEMAS: Record<EventTopic, z.ZodType> = {
  jobs: JobEventSchema,
  metrics: MetricEventSchema,
  models: ModelEventSchema,
  gpu: GpuEventSchema,
  datasets: DatasetEventSchema,
  pipelines: PipelineEventSchema,
  audit: AuditEventSchema,
};

/** What a consumer receives: the Kafka message value, and the data of one SSE event. */
export const EventEnvelopeSchema = z.strictObject({
  event_id: z.string().describe('stable across redeliveries: the outbox row id'),
  topic: z.enum(EVENT_TOPICS),
  key: z.string().describe('the resource; Kafka partitions by it, so events of one key arrive in order'),
  organization_id: z.string(),
  time: z.string(),
  data: z.record(z.string(), z.unknown()),
});
export type EventEnvelope = z.infer<typeof EventEnvelopeSchema>;

export const kafkaTopic = (prefix: string, topic: EventTopic): string => `${prefix}.${topic}`;
