// The local executor: jobs outlive their starter, re-attach instead of starting twice, and a job killed
// without an exit code is reported lost (so the activity restarts it, resuming from its checkpoint).
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalExecutor, jobState, launchCommand } from '../activities/executor/local.js';
import { loadConfig } from '../lib/config.js';

const until = async (pred: () => boolean, ms = 10_000) => {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
};

function job(script: string) {
  const workdir = mkdtempSync(join(tmpdir(), 'hanzo-ml-job-'));
  // The workspace path is an argument, so the executor can tell this process from a reused pid.
  return { workdir, command: [process.execPath, '-e', script, workdir], env: {} };
}

describe('local executor', () => {
  it('starts a job once: a second startOrAttach adopts the running process', async () => {
    const ex = new LocalExecutor();
    const j = job('setTimeout(() => process.exit(0), 1500)');
    const first = await ex.startOrAttach(j);
    const second = await ex.startOrAttach(j);
    expect(first.state).toBe('running');
    expect(second).toEqual(first);
    await until(() => jobState(j.workdir).state === 'exited');
    expect(jobState(j.workdir)).toEqual({ state: 'exited', exitCode: 0 });
    expect(JSON.parse(readFileSync(join(j.workdir, 'command.json'), 'utf8')).command).toEqual(j.command);
  });

  it('records a non-zero exit code and the job log', async () => {
    const ex = new LocalExecutor();
    const j = job('console.error("boom"); process.exit(7)');
    await ex.startOrAttach(j);
    await until(() => jobState(j.workdir).state === 'exited');
    expect(jobState(j.workdir)).toEqual({ state: 'exited', exitCode: 7 });
    expect(readFileSync(join(j.workdir, 'job.log'), 'utf8')).toContain('boom');
  });

  it('reports a job killed with its wrapper as lost, and restarts it in the same workspace', async () => {
    const ex = new LocalExecutor();
    const j = job('setTimeout(() => process.exit(0), 60000)');
    const s = await ex.startOrAttach(j);
    if (s.state !== 'running') throw new Error('not running');
    const wrapper = Number(readFileSync(`/proc/${s.pid}/stat`, 'utf8').split(' ')[3]);
    process.kill(-wrapper, 'SIGKILL'); // the whole process group, as a machine crash would
    await until(() => jobState(j.workdir).state === 'lost');
    // startOrAttach on a lost job starts exactly one new process (not one per stale pid file read).
    const again = await ex.startOrAttach({ ...j, command: [process.execPath, '-e', 'setTimeout(() => process.exit(0), 1500)', j.workdir] });
    expect(again.state).toBe('running');
    expect(ex.state(j.workdir)).toEqual(again);
    const wrappers = execFileSync('pgrep', ['-f', `hanzo-ml-job .*${j.workdir}`]).toString().trim().split('\n');
    expect(wrappers).toHaveLength(1);
    await until(() => jobState(j.workdir).state === 'exited');
  });

  it('delivers SIGTERM to the job itself, whose exit code is then recorded', async () => {
    const ex = new LocalExecutor();
    const j = job('process.on("SIGTERM", () => process.exit(143)); setInterval(() => {}, 1000)');
    await ex.startOrAttach(j);
    await new Promise((r) => setTimeout(r, 300));
    expect(ex.signal(j.workdir, 'SIGTERM')).toBe(true);
    await until(() => jobState(j.workdir).state === 'exited');
    expect(jobState(j.workdir)).toEqual({ state: 'exited', exitCode: 143 });
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

  it('launches a job of several processes under torchrun, each with its own rank', async () => {
    const python = loadConfig({ HANZO_ML_LOGGING_LEVEL: 'error' }).bootstrap.python;
    const workdir = mkdtempSync(join(tmpdir(), 'hanzo-ml-job-'));
    // A module that records which rank of how many it is: torchrun sets RANK and WORLD_SIZE per process.
    writeFileSync(join(workdir, 'rank_probe.py'), 'import os, sys\nopen(os.path.join(sys.argv[1], f"rank-{os.environ[\'RANK\']}-of-{os.environ[\'WORLD_SIZE\']}"), "w").close()\n');
    const request = { workdir, command: [python, '-m', 'rank_probe', workdir], env: { PYTHONPATH: workdir }, processes: 2 };
    expect(launchCommand(request)).toEqual([python, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node=2', '-m', 'rank_probe', workdir]);
    const ex = new LocalExecutor();
    await ex.startOrAttach(request);
    await until(() => jobState(workdir).state === 'exited', 120_000);
    expect(jobState(workdir)).toEqual({ state: 'exited', exitCode: 0 });
    expect(readdirSync(workdir).filter((f) => f.startsWith('rank-')).sort()).toEqual(['rank-0-of-2', 'rank-1-of-2']);
    expect(JSON.parse(readFileSync(join(workdir, 'command.json'), 'utf8')).command).toContain('torch.distributed.run');
  }, 150_000);

  it('refuses to run a multi-process job that is not a python -m command', () => {
    expect(() => launchCommand({ workdir: '/w', command: ['/bin/train', '--spec', 'x'], env: {}, processes: 4 })).toThrow(/must be a python -m command/);
    expect(launchCommand({ workdir: '/w', command: ['/bin/train'], env: {}, processes: 1 })).toEqual(['/bin/train']);
  });
});
