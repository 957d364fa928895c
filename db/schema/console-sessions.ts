import { index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

// A console session signed out before its cookie expires: every replica refuses a cookie whose session id is here.
// The row is needed only until the cookie would have expired by itself (expires_at), then purged.
export const consoleSessionRevocations = pgTable(
  'console_session_revocations',
  {
    sessionId: text('session_id').primaryKey(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('console_session_revocations_expires_at_idx').on(t.expiresAt)],
);
