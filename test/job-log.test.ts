// A job's log as followers read it (lib/job-log.ts) on the file object store: byte offsets run through every
// attempt's job.log in turn, a read from any offset returns exactly the bytes after it, and a log that grows is read
// from where the last read ended.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigSchema } from '../contracts/config.js';
import { JobFiles } from '../lib/job-files.js';
import { JobLog, attemptJobName } from '../lib/job-log.js';
import { FileObjectStore } from '../lib/object-store.js';

const config = ConfigSchema.parse({});

async function readAll(log: JobLog, from: number): Promise<{ text: string; end: number }> {
  const chunks: Buffer[] = [];
  let at = from;
  for (let r = await log.readFrom(at); r; r = await log.readFrom(at)) {
    for await (const c of r.body) chunks.push(c as Buffer);
    at = r.end;
  }
  return { text: Buffer.concat(chunks).toString('utf8'), end: at };
}

describe('a job log read from a byte offset', () => {
  const store = new FileObjectStore(mkdtempSync(join(tmpdir(), 'hanzo-ml-job-log-')));
  const logOf = (attempt: number) => JobFiles.of(store, config, 'org', attemptJobName('job-1-train', attempt)).file('job.log');

  it('reads nothing before the log exists, then what was written, then only what was added', async () => {
    const log = new JobLog(store, config, 'org', 'job-1-train');
    expect(await log.readFrom(0)).toBeNull();
    await store.putText(logOf(1), 'one\ntwo\n');
    expect(await readAll(log, 0)).toEqual({ text: 'one\ntwo\n', end: 8 });
    await store.putText(logOf(1), 'one\ntwo\nthree é\n');
    expect(await readAll(log, 8)).toEqual({ text: 'three é\n', end: 17 });
    expect(await log.readFrom(17)).toBeNull();
  });

  it("runs offsets through every attempt's log in turn, from any offset", async () => {
    await store.putText(logOf(2), 'second attempt\n');
    await store.putText(logOf(3), 'third\n');
    const whole = 'one\ntwo\nthree é\nsecond attempt\nthird\n';
    const log = new JobLog(store, config, 'org', 'job-1-train');
    expect(await readAll(log, 0)).toEqual({ text: whole, end: Buffer.byteLength(whole) });
    for (const offset of [3, 16, 17, 20, 31, 32, 35]) expect((await readAll(log, offset)).text).toBe(Buffer.from(whole).subarray(offset).toString('utf8'));
  });
});
