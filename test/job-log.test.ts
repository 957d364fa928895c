// A job's log as followers read it (lib/job-log.ts) on the file object store: byte offsets run through every
// attempt's job.log of every executor job of the job in turn (each segment's, each conversion step's), a read from
// any offset returns exactly the bytes after it, and a log that grows is read from where the last read ended.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigSchema } from '../contracts/config.js';
import { JobFiles } from '../lib/job-files.js';
import { JobLog, attemptJobName, jobLogNames } from '../lib/job-log.js';
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

describe("a job's log across its segments and executor jobs", () => {
  const store = new FileObjectStore(mkdtempSync(join(tmpdir(), 'hanzo-ml-job-log-')));
  const put = (name: string, attempt: number, text: string) => store.putText(JobFiles.of(store, config, 'org', attemptJobName(name, attempt)).file('job.log'), text);
  const segments = (...n: number[]) => n.map((segment) => ({ segment }));

  it('names every segment\'s executor jobs in order, for each kind of job', () => {
    expect(jobLogNames({ id: 'j', kind: 'recipe', segments: [] })).toEqual(['j-train']);
    expect(jobLogNames({ id: 'j', kind: 'command', segments: segments(2, 1) })).toEqual(['j-command', 'j-s2-command']);
    expect(jobLogNames({ id: 'j', kind: 'eval', segments: segments(1, 2) })).toEqual(['j-eval', 'j-s2-eval']);
    expect(jobLogNames({ id: 'j', kind: 'conversion', segments: segments(1) })).toEqual(['j-merge', 'j-candle-validate', 'j-candle-quantize']);
  });

  it("reads a resumed job's second segment after every attempt of its first, offsets running on", async () => {
    const job = { id: 'job-r', kind: 'recipe', segments: segments(1) };
    const log = new JobLog(store, config, 'org', async () => jobLogNames(job));
    await put('job-r-train', 1, 'first\n');
    await put('job-r-train', 2, 'retried\n');
    expect(await readAll(log, 0)).toEqual({ text: 'first\nretried\n', end: 14 });
    // Paused, then resumed: the new segment is recorded before its job writes a log.
    job.segments = segments(1, 2);
    expect(await log.readFrom(14)).toBeNull();
    await put('job-r-s2-train', 1, 'resumed\n');
    expect(await readAll(log, 14)).toEqual({ text: 'resumed\n', end: 22 });
    await put('job-r-s2-train', 2, 'again\n');
    const whole = 'first\nretried\nresumed\nagain\n';
    expect(await readAll(new JobLog(store, config, 'org', jobLogNames(job)), 0)).toEqual({ text: whole, end: whole.length });
    for (const offset of [3, 6, 14, 18, 22, 25]) expect((await readAll(log, offset)).text).toBe(whole.slice(offset));
  });

  it("reads an eval job's log under its own name, and passes over a conversion step that wrote none", async () => {
    await put('job-e-eval', 1, 'scored\n');
    expect(await readAll(new JobLog(store, config, 'org', jobLogNames({ id: 'job-e', kind: 'eval', segments: segments(1) })), 0)).toEqual({ text: 'scored\n', end: 7 });
    const log = new JobLog(store, config, 'org', jobLogNames({ id: 'job-c', kind: 'conversion', segments: segments(1) }));
    await put('job-c-merge', 1, 'merged\n');
    expect(await readAll(log, 0)).toEqual({ text: 'merged\n', end: 7 });
    await put('job-c-candle-quantize', 1, 'quantized\n');
    expect(await readAll(log, 7)).toEqual({ text: 'quantized\n', end: 17 });
  });
});
