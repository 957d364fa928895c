import { createHash } from 'node:crypto';

/** A UUID-shaped ID derived from a name, so a retried step finds what its earlier attempt created. */
export function deterministicUuid(name: string): string {
  const h = createHash('sha256').update(name).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${((parseInt(h.slice(16, 18), 16) & 0x3f) | 0x80).toString(16)}${h.slice(18, 20)}-${h.slice(20, 32)}`;
}
