// The web console's login session (api/routes/console-session.ts): the token a user signs in with becomes an
// HttpOnly cookie, and the console reads who it is signed in as, and the CSRF token its writes must carry.
import { z } from 'zod';

/** The cookie holding the sealed session, and the header every cookie-authenticated write must carry. */
export const SESSION_COOKIE = 'hanzo_ml_session';
export const CSRF_HEADER = 'x-csrf-token';

export const SessionLoginSchema = z.strictObject({
  token: z.string().trim().min(1, 'expected the API token (or IAM token) to sign in with').describe('an API token of this server, or a Hanzo IAM token'),
});
export type SessionLogin = z.infer<typeof SessionLoginSchema>;

export const SessionViewSchema = z.object({
  subject: z.string(),
  organization: z.string(),
  role: z.enum(['ml-admin', 'ml-researcher', 'ml-viewer']),
  approver: z.boolean().describe('may approve or reject a promotion'),
  csrf_token: z.string().nullable().describe(`send it as the ${CSRF_HEADER} header on every POST, PUT, PATCH and DELETE; null when not signed in by cookie`),
  expires_at: z.string().nullable().describe('when the cookie session ends; null when not signed in by cookie'),
  temporal_ui_url: z.string().nullable().describe("the Temporal UI's namespace page; a workflow's page is <this>/workflows/<workflow id>"),
});
export type SessionView = z.infer<typeof SessionViewSchema>;
