// Console sessions signed out before their cookie expired (db/schema/console-sessions.ts). The cookie is sealed and
// holds no state on the server, so signing out records its session id here; every replica checks it on each
// cookie request (a primary-key probe) and refuses a cookie copied before the sign-out.
import { eq, lt } from 'drizzle-orm';
import type { Db } from '../client.js';
import { consoleSessionRevocations } from '../schema/index.js';

/** Records the session as signed out until it would have expired, and drops rows of sessions expired by now. */
export async function revokeConsoleSession(db: Db, sessionId: string, expiresAt: Date, now = new Date()): Promise<void> {
  await db.insert(consoleSessionRevocations).values({ sessionId, expiresAt }).onConflictDoNothing();
  await purgeExpiredRevocations(db, now);
}

export async function isConsoleSessionRevoked(db: Db, sessionId: string): Promise<boolean> {
  const [row] = await db.select({ id: consoleSessionRevocations.sessionId }).from(consoleSessionRevocations).where(eq(consoleSessionRevocations.sessionId, sessionId)).limit(1);
  return row !== undefined;
}

/** A revoked session's cookie is refused by its own expiry once past it: its row is no longer needed. */
export async function purgeExpiredRevocations(db: Db, now = new Date()): Promise<number> {
  const gone = await db.delete(consoleSessionRevocations).where(lt(consoleSessionRevocations.expiresAt, now)).returning({ id: consoleSessionRevocations.sessionId });
  return gone.length;
}
