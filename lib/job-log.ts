// A job's log as users read it (GET /v1/jobs/{id}/logs, `hanzo-ml job logs`): the job.log in the object store of
// each attempt of each of its executor jobs (every segment's, and each step of a conversion; the job runner mirrors
// it every few seconds and at exit, under either executor), one after the other, addressed by byte offset into that
// concatenation. Reads are range reads of what is new, so a follower
// holds one chunk in memory, never the log.
import type { Readable } from 'node:stream';
import type { Config } from '../contracts/config.js';
import { JOB_FILES } from '../contracts/job-io.js';
import { JobFiles, jobNameOf } from './job-files.js';
import type { ObjectStore } from './object-store.js';

/** The executor's name of a job's attempt: the first is the job's own, a restart after recovery `-r<attempt>`. */
export function attemptJobName(logicalName: string, attempt: number): string {
  return attempt === 1 ? jobNameOf(logicalName) : `${jobNameOf(logicalName)}-r${attempt}`;
}

/** The logical job name a submitted job's first segment runs under (recipe and command jobs). */
export function submittedJobName(jobId: string, kind: string): string {
  return kind === 'recipe' ? `${jobId}-train` : `${jobId}-command`;
}

/** The name a segment's executor jobs are derived from: the job's ID for its first segment (as before resume existed). */
export const segmentOwner = (jobId: string, segment: number): string => (segment === 1 ? jobId : `${jobId}-s${segment}`);

/**
 * The logical names of one segment's executor jobs in the order they run: a recipe's training, a command, an eval
 * job's scoring, or a conversion's merge then Candle validate and quantize (activities/submitted-jobs.ts,
 * activities/eval-job.ts, activities/conversion-job.ts).
 */
export function segmentJobNames(owner: string, kind: string): string[] {
  if (kind === 'recipe') return [`${owner}-train`];
  if (kind === 'eval') return [`${owner}-eval`];
  if (kind === 'conversion') return [`${owner}-merge`, `${owner}-candle-validate`, `${owner}-candle-quantize`];
  return [`${owner}-command`];
}

/** Every executor job whose log is the job's, segment by segment (segment 1 before the first is recorded). */
export function jobLogNames(job: { id: string; kind: string; segments: unknown }): string[] {
  const numbers = ((job.segments ?? []) as { segment: number }[]).map((s) => s.segment).sort((a, b) => a - b);
  return (numbers.length ? numbers : [1]).flatMap((n) => segmentJobNames(segmentOwner(job.id, n), job.kind));
}

export interface LogRead {
  body: Readable;
  /** the log offset after the last byte of `body` */
  end: number;
}

/** One job.log of the sequence: an attempt (from 1) of the `name`th executor job. */
interface Part {
  name: number;
  attempt: number;
}

/**
 * The logical names of the executor jobs whose logs make up one job's log, in order: one name, a list, or a read of
 * them. A read may add names at the end (a resumed job's new segment), never change those before.
 */
export type LogNames = string | readonly string[] | (() => Promise<readonly string[]>);

export class JobLog {
  /** the logs that have ended (a later one exists), whose sizes no longer change, in order */
  private readonly ended: { uri: string; size: number }[] = [];
  /** the first log that has not ended */
  private live: Part = { name: 0, attempt: 1 };

  constructor(
    private readonly store: ObjectStore,
    private readonly config: Pick<Config, 'storage'>,
    private readonly organizationId: string,
    private readonly names: LogNames,
  ) {}

  private async currentNames(): Promise<readonly string[]> {
    if (typeof this.names === 'string') return [this.names];
    return typeof this.names === 'function' ? this.names() : this.names;
  }

  private uriOf(names: readonly string[], p: Part): string {
    return JobFiles.of(this.store, this.config, this.organizationId, attemptJobName(names[p.name]!, p.attempt)).file(JOB_FILES.log);
  }

  /** The size of a log object now (0 when absent): an empty range read, its body dropped unread. */
  private async sizeOf(uri: string): Promise<number> {
    const r = await this.store.readFrom(uri, 0);
    r?.body.destroy();
    return r?.end ?? 0;
  }

  /**
   * The log after `p` once `p` has ended: its next attempt, else the first attempt of the next executor job, once
   * any later log exists (a job that never wrote one is passed over); null while `p` may still grow. Later jobs are
   * looked at first: once one of them has a log, `p`'s job has ended, so the look for its next attempt is final.
   */
  private async nextAfter(names: readonly string[], p: Part): Promise<Part | null> {
    let later = false;
    for (let n = names.length - 1; n > p.name && !later; n--) later = await this.store.exists(this.uriOf(names, { name: n, attempt: 1 }));
    const retry = { name: p.name, attempt: p.attempt + 1 };
    if (await this.store.exists(this.uriOf(names, retry))) return retry;
    if (!later) return null;
    let n = p.name + 1;
    while (n < names.length - 1 && !(await this.store.exists(this.uriOf(names, { name: n, attempt: 1 })))) n++;
    return { name: n, attempt: 1 };
  }

  /**
   * The log's bytes from `offset` to where the log holding that offset ends now; null when there is nothing new
   * yet. Call again from the returned end for more.
   */
  async readFrom(offset: number): Promise<LogRead | null> {
    const names = await this.currentNames();
    let base = 0;
    for (const log of this.ended) {
      if (offset < base + log.size) return this.read(log.uri, offset, base, log.size);
      base += log.size;
    }
    for (;;) {
      if (this.live.name >= names.length) return null;
      const uri = this.uriOf(names, this.live);
      const next = await this.nextAfter(names, this.live);
      if (!next) return this.read(uri, offset, base, Infinity);
      const size = await this.sizeOf(uri);
      this.ended.push({ uri, size });
      this.live = next;
      if (offset < base + size) return this.read(uri, offset, base, size);
      base += size;
    }
  }

  /** Reads one log, which starts at `base` of the whole and holds `size` bytes of it, from `offset` of the whole. */
  private async read(uri: string, offset: number, base: number, size: number): Promise<LogRead | null> {
    const r = await this.store.readFrom(uri, offset - base);
    return r && { body: r.body, end: base + Math.min(r.end, size) };
  }
}
