import { index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { organizations } from './organizations.js';

// An organization's own eval suites: one immutable row per (organization, name, version); a change is a new
// version, so a recorded gate decision's suite@version keeps naming the rules it was decided on.
export const evalSuites = pgTable(
  'eval_suites',
  {
    id: text('id').primaryKey(),
    organizationId: text('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    version: integer('version').notNull(),
    definition: jsonb('definition').notNull().$type<Record<string, unknown>>(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('eval_suites_org_name_version_idx').on(t.organizationId, t.name, t.version), index('eval_suites_org_created_idx').on(t.organizationId, t.createdAt)],
);
