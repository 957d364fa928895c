// The outcome of a production change's reload hook: its event and audit row, in one transaction.
import type { Db } from '../client.js';
import { emitEvent } from './outbox.js';
import { audit } from './auth.js';

export interface ReloadOutcome {
  organizationId: string;
  pipelineId: string | null;
  /** Who changed production: pipeline:<id>, or the user of a manual change (absent from outcomes scheduled before it existed). */
  actor?: string;
  modelName: string;
  version: number;
  hookEventId: string;
  status: 'delivered' | 'failed';
  attempts: number | null;
  error: string | null;
}

export async function recordReloadOutcome(db: Db, o: ReloadOutcome): Promise<void> {
  const common = { name: o.modelName, version: o.version, pipeline_id: o.pipelineId, hook_event_id: o.hookEventId };
  await db.transaction(async (tx) => {
    if (o.status === 'delivered') await emitEvent(tx, o.organizationId, 'models', o.modelName, { event: 'model.reload_notified', ...common, attempts: o.attempts ?? 1 });
    else await emitEvent(tx, o.organizationId, 'models', o.modelName, { event: 'model.reload_failed', ...common, error: o.error ?? 'unknown' });
    await audit(tx, {
      organizationId: o.organizationId,
      actor: o.actor ?? (o.pipelineId ? `pipeline:${o.pipelineId}` : 'system'),
      action: 'model.reload_hook',
      target: `${o.modelName}/${o.version}`,
      outcome: o.status === 'delivered' ? 'ok' : 'failed',
      detail: { hook_event_id: o.hookEventId, attempts: o.attempts, error: o.error },
    });
  });
}
