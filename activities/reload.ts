// The reload hook after a promotion to production (promotion.webhook_url): one signed POST per attempt. The
// workflow retries it with backoff until the receiver answers 2xx or promotion.webhook_deadline passes; Temporal
// keeps the retry schedule, so a worker that dies between attempts loses nothing and the next worker goes on.
import { activityInfo } from '@temporalio/activity';
import type { ActivityDeps } from './deps.js';
import type { Artifact } from '../contracts/pipeline.js';
import type { ReloadHookBody } from '../contracts/reload-hook.js';
import { displayUrl, postReloadHook } from '../lib/reload-hook.js';
import { recordReloadOutcome, type ReloadOutcome } from '../db/repo/reload-hooks.js';
import { FailureType, nonRetryable, retryable } from '../contracts/failures.js';

export interface ReloadNotice {
  organizationId: string;
  /** The pipeline that promoted the version; null for a manual change. */
  pipelineId: string | null;
  /** Who changed production: pipeline:<id>, or the user. */
  actor: string;
  rollback: boolean;
  modelName: string;
  version: number;
  archived: number[];
  artifacts: Record<string, Artifact>;
  promotedAt: string;
  eventId: string;
}

/** One attempt may not outlive this: a receiver that hangs is an attempt that failed, not a stuck pipeline. */
const ATTEMPT_TIMEOUT_MS = 30_000;

export function createReloadActivities(deps: ActivityDeps) {
  return {
    async notifyReload(n: ReloadNotice): Promise<{ http_status: number; attempts: number }> {
      const { webhook_url: url, webhook_secret: secret } = deps.config.promotion;
      // Refused at start-up too (lib/config.ts); here it is a worker whose config changed under a running pipeline.
      if (!url || !secret) throw nonRetryable(FailureType.NotConfigured, 'promotion.webhook_url and promotion.webhook_secret are not both set on this worker');
      const body: ReloadHookBody = {
        event: 'model.promoted',
        event_id: n.eventId,
        organization_id: n.organizationId,
        model: { name: n.modelName, version: n.version, stage: 'production', archived_versions: n.archived },
        artifacts: n.artifacts,
        pipeline_id: n.pipelineId,
        changed_by: n.actor,
        rollback: n.rollback,
        promoted_at: n.promotedAt,
      };
      const { attempt } = activityInfo();
      let answer;
      try {
        answer = await postReloadHook({ url, secret, eventId: n.eventId, rawBody: JSON.stringify(body), timeoutMs: ATTEMPT_TIMEOUT_MS });
      } catch (err) {
        const cause = (err as Error & { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
        throw retryable(FailureType.ReloadHookUnreachable, `reload hook ${displayUrl(url)} unreachable (attempt ${attempt}): ${cause}`);
      }
      if (!answer.ok)
        throw retryable(FailureType.ReloadHookRefused, `reload hook ${displayUrl(url)} answered ${answer.status} (attempt ${attempt}): ${answer.text}`);
      deps.log.info('reload hook delivered', { model: n.modelName, version: n.version, attempt, event_id: n.eventId });
      return { http_status: answer.status, attempts: attempt };
    },

    /** The model.reload_notified / model.reload_failed event and its audit row. */
    async recordReloadOutcome(o: ReloadOutcome): Promise<void> {
      await recordReloadOutcome(deps.db, o);
    },
  };
}
