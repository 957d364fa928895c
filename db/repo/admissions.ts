// The admission gate's slots (db/schema/scheduling.ts). Every decision runs in one transaction holding one
// advisory lock, so two workers asking at once see each other's rows and never admit past a limit.
import { asc, desc, eq, lt, sql } from 'drizzle-orm';
import type { Db } from '../client.js';
import { jobAdmissions } from '../schema/index.js';

export type AdmissionRow = typeof jobAdmissions.$inferSelect;

export interface AdmissionLimits {
  /** null: no limit on concurrent jobs */
  maxJobs: number | null;
  /** null: no limit on the organization's GPUs */
  maxGpus: number | null;
  /** local executor: device indices of this machine jobs may hold; null: GPUs are not assigned here (Kueue's) */
  machineGpus: number | null;
}

export interface AdmissionAnswer {
  admitted: boolean;
  /** 1 = next in the organization's queue; null once admitted */
  position: number | null;
  reason: string;
  gpuIndices: number[];
}

const GATE_LOCK = sql`select pg_advisory_xact_lock(hashtext('hanzo-ml.job-admissions'))`;

/** Asks for (or keeps) a slot; the job waits its turn: priority first, then arrival. */
export async function requestAdmission(
  db: Db,
  job: { name: string; organizationId: string; priority: number; gpus: number; alreadyRunning: boolean },
  limits: AdmissionLimits,
  staleAfterMs: number,
): Promise<AdmissionAnswer> {
  return db.transaction(async (tx) => {
    await tx.execute(GATE_LOCK);
    await tx.delete(jobAdmissions).where(lt(jobAdmissions.heartbeatAt, new Date(Date.now() - staleAfterMs)));
    await tx
      .insert(jobAdmissions)
      .values({ jobName: job.name, organizationId: job.organizationId, priority: job.priority, gpus: job.gpus, state: 'waiting' })
      .onConflictDoUpdate({ target: jobAdmissions.jobName, set: { heartbeatAt: new Date() } });
    const [own] = await tx.select().from(jobAdmissions).where(eq(jobAdmissions.jobName, job.name));
    if (own!.state === 'admitted') return { admitted: true, position: null, reason: 'admitted', gpuIndices: own!.gpuIndices };
    const org = await tx.select().from(jobAdmissions).where(eq(jobAdmissions.organizationId, job.organizationId)).orderBy(desc(jobAdmissions.priority), asc(jobAdmissions.seq));
    const admitted = org.filter((r) => r.state === 'admitted');
    const waiting = org.filter((r) => r.state === 'waiting');
    const position = waiting.findIndex((r) => r.jobName === job.name) + 1;
    const blocked = job.alreadyRunning ? null : whyNotNow(position, admitted, job.gpus, limits);
    const free = limits.machineGpus === null ? [] : freeDevices(limits.machineGpus, await tx.select({ gpuIndices: jobAdmissions.gpuIndices }).from(jobAdmissions).where(eq(jobAdmissions.state, 'admitted')));
    const deviceShortfall = limits.machineGpus !== null && !job.alreadyRunning && free.length < job.gpus;
    if (blocked || deviceShortfall) return { admitted: false, position, reason: blocked ?? `waiting for ${job.gpus} of this machine's ${limits.machineGpus} GPUs (${free.length} free)`, gpuIndices: [] };
    const gpuIndices = limits.machineGpus === null ? [] : free.slice(0, job.gpus);
    await tx.update(jobAdmissions).set({ state: 'admitted', gpuIndices, heartbeatAt: new Date() }).where(eq(jobAdmissions.jobName, job.name));
    return { admitted: true, position: null, reason: 'admitted', gpuIndices };
  });
}

/** Why the job at `position` of its organization's queue cannot start now, or null when it can. */
function whyNotNow(position: number, admitted: AdmissionRow[], gpus: number, limits: AdmissionLimits): string | null {
  if (limits.maxJobs !== null && admitted.length >= limits.maxJobs) return `max_concurrent_jobs ${limits.maxJobs} reached (${admitted.length} running)`;
  const held = admitted.reduce((n, r) => n + r.gpus, 0);
  if (limits.maxGpus !== null && held + gpus > limits.maxGpus) return `max_gpus ${limits.maxGpus}: ${held} held, ${gpus} more asked`;
  // Strict order within the organization: a job behind another never overtakes it (no starvation of big jobs).
  if (position > 1) return `behind ${position - 1} job(s) of its organization with a higher priority or an earlier request`;
  return null;
}

function freeDevices(machineGpus: number, held: { gpuIndices: number[] }[]): number[] {
  const taken = new Set(held.flatMap((r) => r.gpuIndices));
  return Array.from({ length: machineGpus }, (_, i) => i).filter((i) => !taken.has(i));
}

export async function releaseAdmission(db: Db, jobName: string): Promise<void> {
  await db.delete(jobAdmissions).where(eq(jobAdmissions.jobName, jobName));
}

/** Every slot, for the queue listing. */
export async function listAdmissions(db: Db, organizationId?: string): Promise<AdmissionRow[]> {
  const where = organizationId ? eq(jobAdmissions.organizationId, organizationId) : undefined;
  return db.select().from(jobAdmissions).where(where).orderBy(asc(jobAdmissions.organizationId), desc(jobAdmissions.priority), asc(jobAdmissions.seq));
}
