// The local executor: jobs outlive their starter, re-attach instead of starting twice, a job killed without an
// exit code is reported lost (so the activity starts a new attempt, which resumes from its checkpoint), and a
// stop delivers SIGTERM, then SIGKILL to every process of the job after the grace period.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalExecutor, jobState } from '../jobs/executor/local.js';
import type { JobRequest } from '../jobs/executor/types.js';

const until = async (pred: () => boolean, ms = 10_000) => {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
};

/** An executor whose jobs are node scripts (the scratch path is an argument, so pids are told apart). */
function executor(scripts: Record<string, string>) {
  const workRoot = mkdtempSync(join(tmpdir(), 'hanzo-ml-jobs-'));
  const ex = new LocalExecutor({ workRoot, python: 'unused', env: { JOB_ENV: 'set' }, command: (job, scratch) => [process.execPath, '-e', scripts[job.name]!, scratch] });
  return { ex, workdir: (name: string) => join(workRoot, name) };
}

function request(name: string, secretEnv: Record<string, string> = {}): JobRequest {
  return {
    name,
    envelopeUri: 'file:///unused',
    organizationId: 'org',
    kind: 'test',
    priority: null,
    resources: { nodes: 1, processes: 1, gpus_per_node: 0, gpu_type: null, image: null, cpu: null, memory: null },
    env: {},
    secretEnv,
  };
}

describe('local executor', () => {
  it('starts a job once: a second startOrAttach adopts the running process', async () => {
    const { ex, workdir } = executor({ a: 'setTimeout(() => process.exit(0), 1500)' });
    const first = await ex.startOrAttach(request('a'));
    const second = await ex.startOrAttach(request('a'));
    expect(first.state).toBe('running');
    expect(second).toEqual(first);
    const wrappers = execFileSync('pgrep', ['-f', `hanzo-ml-job .*${workdir('a')}`]).toString().trim().split('\n');
    expect(wrappers).toHaveLength(1);
    await until(() => jobState(workdir('a')).state === 'exited');
    expect(await ex.state(request('a'))).toEqual({ state: 'exited', exitCode: 0 });
  });

  it('gives a job its own environment and secrets, never the worker\'s', async () => {
    process.env.HANZO_ML_API_SECRET_FOR_TEST = 'do-not-leak';
    try {
      const { ex, workdir } = executor({ env: 'console.log(JSON.stringify(process.env)); process.exit(0)' });
      await ex.startOrAttach(request('env', { HANZO_ML_TRACKING_TOKEN: 'job-token' }));
      await until(() => jobState(workdir('env')).state === 'exited');
      const env = JSON.parse(readFileSync(join(workdir('env'), 'job.log'), 'utf8')) as Record<string, string>;
      expect(env.JOB_ENV).toBe('set');
      expect(env.HANZO_ML_TRACKING_TOKEN).toBe('job-token');
      expect(env.HANZO_ML_API_SECRET_FOR_TEST).toBeUndefined();
    } finally {
      delete process.env.HANZO_ML_API_SECRET_FOR_TEST;
    }
  });

  it('records a non-zero exit code and the job log', async () => {
    const { ex, workdir } = executor({ b: 'console.error("boom"); process.exit(7)' });
    await ex.startOrAttach(request('b'));
    await until(() => jobState(workdir('b')).state === 'exited');
    expect(jobState(workdir('b'))).toEqual({ state: 'exited', exitCode: 7 });
    expect(await ex.logTail(request('b'), 5)).toContain('boom');
  });

  it('reports a job killed with its wrapper as lost, and does not start it again by itself', async () => {
    const { ex, workdir } = executor({ c: 'setTimeout(() => process.exit(0), 60000)' });
    expect((await ex.startOrAttach(request('c'))).state).toBe('running');
    const wrapper = Number(readFileSync(join(workdir('c'), 'wrapper.pid'), 'utf8'));
    process.kill(-wrapper, 'SIGKILL'); // the whole process group, as a machine crash would
    await until(() => jobState(workdir('c')).state === 'lost');
    // A lost attempt stays lost: the activity decides on a new attempt (a new name), never a silent restart.
    expect((await ex.startOrAttach(request('c'))).state).toBe('lost');
    expect(() => execFileSync('pgrep', ['-f', `hanzo-ml-job .*${workdir('c')}`])).toThrow();
  });

  it('stops a job with SIGTERM and records the exit code it chose', async () => {
    const { ex, workdir } = executor({ d: 'process.on("SIGTERM", () => process.exit(143)); setInterval(() => {}, 1000)' });
    await ex.startOrAttach(request('d'));
    await new Promise((r) => setTimeout(r, 300));
    await ex.stop(request('d'), 10);
    expect(jobState(workdir('d'))).toEqual({ state: 'exited', exitCode: 143 });
  });

  it('kills a job that ignores SIGTERM once the grace period is over', async () => {
    const { ex, workdir } = executor({ e: 'process.on("SIGTERM", () => {}); setInterval(() => {}, 1000)' });
    await ex.startOrAttach(request('e'));
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    await ex.stop(request('e'), 1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    await until(() => jobState(workdir('e')).state !== 'running');
    expect(() => execFileSync('pgrep', ['-f', workdir('e')])).toThrow();
  });

  it('calls a job whose child has exited finishing, not lost, while its wrapper has yet to write the exit code', async () => {
    // The window between the wrapper reaping the child and renaming `exitcode` into place: a poll landing
    // there must not restart a job that has in fact finished.
    const workdir = mkdtempSync(join(tmpdir(), 'hanzo-ml-job-'));
    const gone = spawn(process.execPath, ['-e', '0', workdir]);
    await new Promise((r) => gone.on('exit', r));
    const wrapper = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)', workdir]);
    try {
      writeFileSync(join(workdir, 'child.pid'), `${gone.pid}\n`);
      writeFileSync(join(workdir, 'wrapper.pid'), `${wrapper.pid}\n`);
      expect(jobState(workdir).state).toBe('running');
      writeFileSync(join(workdir, 'exitcode'), '0\n');
      expect(jobState(workdir)).toEqual({ state: 'exited', exitCode: 0 });
    } finally {
      wrapper.kill('SIGKILL');
    }
    await new Promise((r) => wrapper.on('exit', r));
    execFileSync('rm', ['-f', join(workdir, 'exitcode')]);
    expect(jobState(workdir).state).toBe('lost');
  });

  it('refuses a multi-node job before starting anything', async () => {
    const { ex } = executor({});
    await expect(ex.validate({ ...request('f'), resources: { ...request('f').resources, nodes: 2 } })).rejects.toThrow(/2 nodes needs scheduler.executor: kubernetes/);
  });
});
