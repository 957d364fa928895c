// A job's log as users read it (GET /v1/jobs/{id}/logs, `hanzo-ml job logs`): the job.log of each of its attempts
// in the object store (the job runner mirrors it every few seconds and at exit, under either executor), one after
// the other, addressed by byte offset into that concatenation. Reads are range reads of what is new, so a follower
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

/** The logical job name a submitted job runs under (activities/submitted-jobs.ts, activities/training.ts). */
export function submittedJobName(jobId: string, kind: string): string {
  return kind === 'recipe' ? `${jobId}-train` : `${jobId}-command`;
}

export interface LogRead {
  body: Readable;
  /** the log offset after the last byte of `body` */
  end: number;
}

export class JobLog {
  /** sizes of attempts that have ended (a later attempt exists), which no longer change */
  private readonly finalSizes: number[] = [];

  constructor(
    private readonly store: ObjectStore,
    private readonly config: Pick<Config, 'storage'>,
    private readonly organizationId: string,
    private readonly logicalName: string,
  ) {}

  private uriOf(attempt: number): string {
    return JobFiles.of(this.store, this.config, this.organizationId, attemptJobName(this.logicalName, attempt)).file(JOB_FILES.log);
  }

  /** The size of a log object now (0 when absent): an empty range read, its body dropped unread. */
  private async sizeOf(uri: string): Promise<number> {
    const r = await this.store.readFrom(uri, 0);
    r?.body.destroy();
    return r?.end ?? 0;
  }

  /**
   * The log's bytes from `offset` to where the attempt holding that offset ends now; null when there is nothing
   * new yet. Call again from the returned end for more.
   */
  async readFrom(offset: number): Promise<LogRead | null> {
    let base = 0;
    for (let attempt = 1; ; attempt++) {
      const ended = attempt <= this.finalSizes.length || (await this.store.exists(this.uriOf(attempt + 1)));
      if (ended && attempt > this.finalSizes.length) this.finalSizes.push(await this.sizeOf(this.uriOf(attempt)));
      const size = ended ? this.finalSizes[attempt - 1]! : Infinity;
      if (offset < base + size) {
        const r = await this.store.readFrom(this.uriOf(attempt), offset - base);
        return r && { body: r.body, end: base + Math.min(r.end, size) };
      }
      base += size;
    }
  }
}
