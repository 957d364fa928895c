// Standard Webhooks signatures (https://www.standardwebhooks.com): the receiver checks
//   webhook-signature: v1,<base64 HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>">
// keyed with the base64 bytes of the endpoint's secret "whsec_<base64>". Written on node:crypto rather than the
// `standardwebhooks` npm package: the package signs with a pure-JS SHA-256 and a base64 dependency for what is
// one HMAC here, and the test checks these functions against the specification's published example.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX = 'whsec_';

/** A new endpoint secret: 32 random bytes, as Standard Webhooks writes them. */
export function newWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

function keyOf(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error('a webhook secret starts with "whsec_"');
  return Buffer.from(secret.slice(PREFIX.length), 'base64');
}

/** The webhook-signature header's value for one attempt. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac('sha256', keyOf(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

/** True when one of the header's space-separated signatures is ours (receivers and tests). */
export function verifyWebhook(secret: string, headers: { id: string; timestamp: string; signature: string }, body: string): boolean {
  const want = Buffer.from(signWebhook(secret, headers.id, Number(headers.timestamp), body));
  return headers.signature.split(' ').some((sig) => {
    const got = Buffer.from(sig);
    return got.length === want.length && timingSafeEqual(got, want);
  });
}
