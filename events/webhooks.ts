// Webhook delivery: the relay that sends the deliveries the catalogue queued when jobs ended (db/repo/webhooks.ts).
// Durable by the catalogue, not by a process: the delivery row commits with the job's end, each attempt's outcome
// and next time are written back, and a relay that dies mid-send leaves a claim that lapses, so a restarted worker
// (or any other process running the relay) sends it again with the same webhook-id. Chosen over a Temporal
// workflow per delivery because the row is written in the job's own transaction (nothing to start, nothing lost
// between the status change and a workflow start) and every process shape already runs this part.
//
// Never to a private, loopback or link-local address unless webhooks.allow_private_targets: the check runs on the
// addresses the connection actually uses (a lookup hook of the socket, so a DNS answer that changes between a
// check and the connect cannot slip through), and redirects are not followed.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP } from 'node:net';
import type { Config } from '../contracts/config.js';
import type { Db } from '../db/client.js';
import { claimDueDeliveries, recordDeliveryAttempt, type ClaimedDelivery } from '../db/repo/webhooks.js';
import { durationMs } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import { signWebhook } from '../lib/webhook-signature.js';

const PRIVATE = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) PRIVATE.addSubnet(net, bits, 'ipv4');
// IPv6 forms that carry an IPv4 address (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16, IPv4-compatible
// ::/96, which holds :: and ::1 too) are refused whole: a gateway may turn them into a private IPv4 destination.
// Site-local fec0::/10 is deprecated but still routed by some networks.
for (const [net, bits] of [
  ['::', 96], ['64:ff9b::', 96], ['64:ff9b:1::', 48], ['2002::', 16], ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8],
] as const) PRIVATE.addSubnet(net, bits, 'ipv6');

/**
 * A private, loopback, link-local, multicast or unspecified address, or an IPv6 address embedding an IPv4 one
 * through NAT64, 6to4 or the IPv4-compatible form (IPv4-mapped IPv6 is checked as IPv4).
 */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return PRIVATE.check(mapped[1]!, 'ipv4');
  const family = isIP(address);
  if (family === 0) return true;
  return PRIVATE.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

export class WebhookTargetRefused extends Error {}

/** The socket's lookup: resolves, then refuses when any answer is a private address. */
function guardedLookup(allowPrivate: boolean): NonNullable<RequestOptions['lookup']> {
  return ((hostname: string, options: { all?: boolean }, callback: (err: Error | null, address: string | LookupAddress[], family?: number) => void) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const refused = allowPrivate ? undefined : addresses.find((a) => isPrivateAddress(a.address));
      if (refused) return callback(new WebhookTargetRefused(`${hostname} resolves to ${refused.address}, a private address (webhooks.allow_private_targets is false)`), []);
      if (options.all) return callback(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  }) as unknown as NonNullable<RequestOptions['lookup']>;
}

export interface SendResult {
  ok: boolean;
  status: number | null;
  error: string | null;
}

/**
 * One POST of `body` to `url`; a 2xx is delivered, a redirect is an answer like any other non-2xx. `timeoutMs`
 * bounds the whole attempt, from the lookup to the answer's last byte, not only the socket's idle time: a
 * receiver trickling bytes is cut off, so an attempt never outlives the relay's claim on its delivery.
 */
export function postWebhook(url: string, headers: Record<string, string>, body: string, o: { allowPrivate: boolean; timeoutMs: number }): Promise<SendResult> {
  const target = new URL(url);
  const host = target.hostname.replace(/^\[|\]$/g, '');
  // An address literal is connected to without a lookup: checked here.
  if (isIP(host) && !o.allowPrivate && isPrivateAddress(host))
    return Promise.resolve({ ok: false, status: null, error: `${host} is a private address (webhooks.allow_private_targets is false)` });
  const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    let settled = false;
    const settle = (result: SendResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      resolve(result);
    };
    const failed = (error: string): void => settle({ ok: false, status: null, error });
    const req = send(
      target,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'user-agent': 'hanzo-ml-webhooks', ...headers },
        lookup: guardedLookup(o.allowPrivate),
        // A fresh connection per attempt: a pooled one would skip the lookup, and with it the address check.
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          settle({ ok: status >= 200 && status < 300, status, error: status >= 200 && status < 300 ? null : `answered HTTP ${status}` });
        });
        res.on('error', (err) => failed(err.message));
        res.on('close', () => failed('the connection closed before the answer ended'));
      },
    );
    const deadline = setTimeout(() => {
      failed(`no complete answer within ${o.timeoutMs} ms`);
      req.destroy();
    }, o.timeoutMs);
    req.on('error', (err) => failed(err.message));
    req.end(body);
  });
}

/** The wait before attempt `attempts + 1`: initial x 2^(attempts-1), at most an hour. */
export function backoffMs(attempts: number, initialMs: number): number {
  return Math.min(initialMs * 2 ** Math.max(0, attempts - 1), 3_600_000);
}

/** Sends one claimed delivery and records the outcome. */
export async function deliverOne(db: Db, config: Config, { delivery, endpoint }: ClaimedDelivery, now = (): number => Date.now()): Promise<SendResult> {
  const body = JSON.stringify(delivery.payload);
  const timestamp = Math.floor(now() / 1000);
  const result = await postWebhook(
    endpoint.url,
    { 'webhook-id': delivery.id, 'webhook-timestamp': String(timestamp), 'webhook-signature': signWebhook(endpoint.secret, delivery.id, timestamp, body) },
    body,
    { allowPrivate: config.webhooks.allow_private_targets, timeoutMs: durationMs(config.webhooks.timeout) },
  );
  const attempts = delivery.attempts + 1;
  const retry = !result.ok && attempts < config.webhooks.max_attempts;
  // Written only under this attempt's own claim (see recordDeliveryAttempt).
  await recordDeliveryAttempt(
    db,
    delivery.id,
    delivery.claimedUntil!,
    result.ok ? { ok: true } : { ok: false, error: result.error ?? 'failed', retryAt: retry ? new Date(now() + backoffMs(attempts, durationMs(config.webhooks.initial_backoff))) : null },
  );
  return result;
}

export interface WebhookRelay {
  /** one round: sends what is due; resolves with the number of attempts made */
  drain(): Promise<number>;
  stop(): Promise<void>;
}

const BATCH = 20;

/** Runs the delivery relay until stopped: every `idleMs` when nothing was due. */
export function startWebhookRelay(o: { db: Db; config: Config; log: Logger; idleMs?: number }): WebhookRelay {
  // A claim outlasts one attempt of every delivery of a batch, sent concurrently (each attempt is cut off at
  // webhooks.timeout), with room left to record the outcomes.
  const claimMs = durationMs(o.config.webhooks.timeout) * 2 + 5_000;
  const drain = async (): Promise<number> => {
    let total = 0;
    for (;;) {
      const batch = await claimDueDeliveries(o.db, BATCH, claimMs);
      if (!batch.length) return total;
      const results = await Promise.all(batch.map((d) => deliverOne(o.db, o.config, d)));
      results.forEach((r, i) => {
        if (!r.ok) o.log.warn('webhook delivery failed', { delivery: batch[i]!.delivery.id, endpoint: batch[i]!.endpoint.id, error: r.error });
      });
      total += batch.length;
    }
  };
  let stopped = false;
  let wake: (() => void) | null = null;
  const loop = (async () => {
    while (!stopped) {
      try {
        await drain();
      } catch (err) {
        o.log.warn('webhook relay: round failed, retrying', { error: (err as Error).message });
      }
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, o.idleMs ?? 1000).unref();
      });
    }
  })();
  return {
    drain,
    async stop() {
      stopped = true;
      wake?.();
      await loop;
    },
  };
}
