import { and, asc, eq } from 'drizzle-orm';
import type { Db } from '../client.js';
import { evalSuites } from '../schema/index.js';

export type EvalSuiteRow = typeof evalSuites.$inferSelect;

/** A suite's name@version is taken in its organization: versions are immutable. */
export class EvalSuiteExistsError extends Error {}

const isDuplicate = (err: unknown) => /eval_suites_org_name_version_idx|duplicate key/.test(String((err as Error).message) + String((err as { cause?: Error }).cause?.message));

export async function insertEvalSuite(db: Db, row: Omit<typeof evalSuites.$inferInsert, 'createdAt'>, audited?: (tx: Db, row: EvalSuiteRow) => Promise<void>): Promise<EvalSuiteRow> {
  try {
    return await db.transaction(async (tx) => {
      const [inserted] = await tx.insert(evalSuites).values(row).returning();
      await audited?.(tx as unknown as Db, inserted!);
      return inserted!;
    });
  } catch (err) {
    if (isDuplicate(err)) throw new EvalSuiteExistsError(`eval suite ${row.name}@${row.version} already exists: a suite version is immutable, register version ${row.version + 1}`);
    throw err;
  }
}

export async function findEvalSuite(db: Db, organizationId: string, name: string, version: number): Promise<EvalSuiteRow | null> {
  const [row] = await db
    .select()
    .from(evalSuites)
    .where(and(eq(evalSuites.organizationId, organizationId), eq(evalSuites.name, name), eq(evalSuites.version, version)));
  return row ?? null;
}

export async function listEvalSuites(db: Db, organizationId: string, name?: string): Promise<EvalSuiteRow[]> {
  const where = [eq(evalSuites.organizationId, organizationId)];
  if (name) where.push(eq(evalSuites.name, name));
  return db.select().from(evalSuites).where(and(...where)).orderBy(asc(evalSuites.name), asc(evalSuites.version));
}
