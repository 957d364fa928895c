// The files a run recorded (run_artifacts): checkpoints, eval reports, model weights, with size and checksum.
import { asc, eq } from 'drizzle-orm';
import type { Db } from '../client.js';
import { runArtifacts } from '../schema/index.js';

export async function recordArtifact(
  db: Db,
  a: { runId: string; path: string; uri: string; sizeBytes: number; sha256: string; metadata?: Record<string, unknown> },
): Promise<void> {
  await db
    .insert(runArtifacts)
    .values({ ...a, metadata: a.metadata ?? {} })
    .onConflictDoNothing();
}

export async function artifactsOf(db: Db, runId: string): Promise<(typeof runArtifacts.$inferSelect)[]> {
  return db.select().from(runArtifacts).where(eq(runArtifacts.runId, runId)).orderBy(asc(runArtifacts.path));
}
