// /v1/webhooks: an organization's admin registers the endpoints its jobs' terminal states are POSTed to (Standard
// Webhooks signatures; events/webhooks.ts delivers them). The signing secret is shown once, in the creation's answer.
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import type { ApiDeps, AppEnv } from '../deps.js';
import { WebhookEndpointCreateSchema, type WebhookEndpointView } from '../../contracts/openai.js';
import { deleteWebhookEndpoint, getWebhookEndpoint, insertWebhookEndpoint, listDeliveries, listWebhookEndpoints, type WebhookEndpointRow } from '../../db/repo/webhooks.js';
import { newWebhookSecret } from '../../lib/webhook-signature.js';
import { auditedChange } from '../audit.js';
import { requireRole } from '../auth.js';
import { notFound } from '../errors.js';
import { jsonBody } from '../validate.js';

export function webhookEndpointView(row: WebhookEndpointRow): WebhookEndpointView {
  return { id: row.id, object: 'webhook_endpoint', url: row.url, events: row.events, created_at: Math.floor(row.createdAt.getTime() / 1000), created_by: row.createdBy };
}

export function webhookRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  async function owned(c: Context<AppEnv>, id: string): Promise<WebhookEndpointRow> {
    const row = await getWebhookEndpoint(deps.db, c.get('principal').organizationId, id);
    if (!row) throw notFound(`webhook endpoint ${id}`);
    return row;
  }

  app.post('/', async (c) => {
    const principal = requireRole(c, 'admin');
    const body = await jsonBody(c, WebhookEndpointCreateSchema);
    const id = `we_${randomUUID().replaceAll('-', '')}`;
    const secret = newWebhookSecret();
    const row = await auditedChange(c, deps, { action: 'webhook.create', target: id, detail: { url: body.url, events: body.events } }, (tx) =>
      insertWebhookEndpoint(tx, { id, organizationId: principal.organizationId, url: body.url, events: body.events, secret, createdBy: principal.subject }),
    );
    return c.json({ ...webhookEndpointView(row), secret }, 201);
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'admin');
    return c.json({ object: 'list', data: (await listWebhookEndpoints(deps.db, principal.organizationId)).map(webhookEndpointView) });
  });

  /** The endpoint's latest deliveries: state, attempts and the last error, to see why a receiver heard nothing. */
  app.get('/:id/deliveries', async (c) => {
    const principal = requireRole(c, 'admin');
    const row = await owned(c, c.req.param('id'));
    const rows = await listDeliveries(deps.db, principal.organizationId, row.id);
    return c.json({
      object: 'list',
      data: rows.map((d) => ({
        id: d.id,
        event_type: d.eventType,
        state: d.state,
        attempts: d.attempts,
        last_error: d.lastError,
        next_attempt_at: d.state === 'pending' ? d.nextAttemptAt.toISOString() : null,
        delivered_at: d.deliveredAt?.toISOString() ?? null,
        created_at: d.createdAt.toISOString(),
      })),
    });
  });

  app.delete('/:id', async (c) => {
    const principal = requireRole(c, 'admin');
    const row = await owned(c, c.req.param('id'));
    await auditedChange(c, deps, { action: 'webhook.delete', target: row.id }, (tx) => deleteWebhookEndpoint(tx, principal.organizationId, row.id));
    return c.json({ id: row.id, object: 'webhook_endpoint', deleted: true });
  });

  return app;
}
