// Durability of an upload's preparation: kill the whole `hanzo-ml dev` process AND its prepare-dataset job (as a
// machine crash would) while the job reports that it is reading, start dev again on the same HANZO_ML_HOME, and the
// version ends ready with the content hash of the same bytes uploaded without a crash; the name has that one
// version, and its prefix in the datasets bucket holds the same files as the uncrashed one's, nothing half made.
import { existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { DevProcess, pids } from './support/processes.js';
import type { Dataset } from '../contracts/datasets.js';
import type { JobView } from '../contracts/jobs.js';

const home = mkdtempSync(join(tmpdir(), 'hanzo-ml-prep-crash-'));
let running: DevProcess | null = null;

/** Distinct chat records, every 50th repeated once: enough that reading them takes the job many seconds. */
const RECORDS = 240_000;
const chat = (i: number) => JSON.stringify({ messages: [{ role: 'user', content: `question ${i}: what is ${i} times ${i % 97}?` }, { role: 'assistant', content: `It is ${i * (i % 97)}, order ${i}.` }] });
const body = (): Buffer => Buffer.from(Array.from({ length: RECORDS }, (_, i) => chat(i - (i % 50 === 49 ? 1 : 0))).join('\n'));

/** Every file under a version's prefix in the file store, relative to it. */
function filesOf(version: Dataset): string[] {
  const dir = fileURLToPath(version.storage_path);
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

describe('crash and restart of the whole dev process while an upload is prepared', () => {
  afterAll(async () => {
    await running?.stop();
  });

  it('ends the version ready with the uncrashed content hash after kill -9 of dev and prepare-dataset mid-read, with no partial version or stray file', { timeout: 25 * 60_000 }, async () => {
    const dev = await DevProcess.on(home, 250);
    running = dev;
    await dev.start(180_000);
    const accepted = await dev.api<Dataset>('POST', '/v1/datasets?name=crashed&format=jsonl', body());
    expect(accepted).toMatchObject({ status: 'preparing', job_id: expect.any(String) });

    // The job tells its reading progress before it ends: kill while it is part way through the input.
    const reading = await dev.until(async () => {
      const job = await dev.api<JobView>('GET', `/v1/jobs/${accepted.job_id}`);
      const m = /^reading: ([\d,]+) records, (\d+)% of [\d.]+ MB$/.exec(job.message ?? '');
      return job.status === 'running' && m && Number(m[1]!.replaceAll(',', '')) > 0 && Number(m[2]) < 90 ? job : null;
    }, 10 * 60_000, 'the job to report reading part of the input');
    expect(reading.type).toBe('data_preparation');
    const jobDirs = readdirSync(join(home, 'work', 'jobs')).filter((n) => n.includes(accepted.id)).map((n) => join(home, 'work', 'jobs', n));
    expect(jobDirs).toHaveLength(1);
    const jobDir = jobDirs[0]!;
    await dev.crash(jobDir);
    expect(existsSync(join(jobDir, 'exitcode'))).toBe(false);
    expect(pids(jobDir)).toEqual([]);

    await dev.start(180_000, 'dev to start again');
    const crashed = await dev.until(async () => {
      const v = await dev.api<Dataset>('GET', `/v1/datasets/${accepted.id}`);
      return v.status !== 'preparing' ? v : null;
    }, 15 * 60_000, 'the version to leave preparing after the restart');
    expect(crashed).toMatchObject({ status: 'ready', issues: null, version: 1 });
    expect((await dev.api<JobView>('GET', `/v1/jobs/${accepted.job_id}`)).status).toBe('succeeded');

    // The same bytes, uploaded with no crash: the same content, hash and files.
    const clean = await dev.api<Dataset>('POST', '/v1/datasets?name=uncrashed&format=jsonl&wait=true&wait_seconds=900', body());
    expect(clean.status).toBe('ready');
    expect(crashed.sha256).toBe(clean.sha256);
    expect(crashed.num_records).toBe(clean.num_records);
    expect(crashed.num_records).toBe(RECORDS - Math.floor(RECORDS / 50));
    for (const s of ['train', 'validation', 'test'] as const) expect(crashed.splits![s].sha256).toBe(clean.splits![s].sha256);
    // One version of the name, and under its prefix exactly what the uncrashed version has: no half-copied split.
    const versions = (await dev.api<{ datasets: Dataset[] }>('GET', '/v1/datasets?name=crashed')).datasets;
    expect(versions.map((v) => [v.id, v.status])).toEqual([[accepted.id, 'ready']]);
    expect(filesOf(crashed)).toEqual(filesOf(clean));
    const nameDir = join(fileURLToPath(crashed.storage_path), '..');
    expect(readdirSync(nameDir)).toEqual([accepted.id]);
  });
});
