// `hanzo-ml job pause|resume|submit --dry-run` against a real embedded API (PGlite, Temporal dev server) with no
// worker, so what the commands ask for stays observable: pause is a signal in the job's workflow history and a row
// of the audit trail; resume of a job that is not paused, or from a checkpoint it does not have, exits non-zero with
// the API's answer; a dry run prints the estimate and queues nothing.
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobWorkflowId, type JobDryRun } from '../contracts/jobs.js';
import { auditLog, jobs } from '../db/schema/index.js';
import { resumeBody } from '../cli/job.js';
import { startTestStack, type TestStack } from './support/stack.js';

const bin = fileURLToPath(new URL('../bin/hanzo-ml', import.meta.url));
const exec = promisify(execFile);

let stack: TestStack;
const env = () => ({ ...process.env, HANZO_ML_API_URL: stack.runtime.apiUrl, HANZO_ML_TOKEN: stack.loaded.config.auth.dev_token });
/** Runs the CLI; a non-zero exit is returned, not thrown. */
const cli = (...args: string[]) => exec(bin, args, { env: env() }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => e);
const jobFile = (text: string): string => {
  const file = join(mkdtempSync(join(tmpdir(), 'job-cli-')), 'job.yaml');
  writeFileSync(file, text);
  return file;
};
const SLEEPER = jobFile(['name: cli-sleeper', 'type: training', 'image: trainer', 'command: ["sleep", "600"]', 'schedule:', '  max_duration: 2h', ''].join('\n'));

beforeAll(async () => {
  stack = await startTestStack({}, { worker: false });
}, 180_000);
afterAll(async () => stack?.stop());

describe('hanzo-ml job pause and resume', () => {
  it('pauses a job: a pauseJob signal in its workflow history and job.pause in the audit trail', async () => {
    const submitted = await cli('job', 'submit', '--config', SLEEPER);
    expect(submitted.code, submitted.stderr).toBe(0);
    const id = submitted.stdout.trim();
    const out = await cli('job', 'pause', id);
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({ id, status: 'pause_requested' });
    const history = await stack.runtime.client.workflow.getHandle(jobWorkflowId(id)).fetchHistory();
    expect(history.events?.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'pauseJob')).toBe(true);
    const rows = await stack.runtime.catalogue.db.select().from(auditLog).where(eq(auditLog.target, id));
    expect(rows.map((r) => r.action)).toContain('job.pause');

    // Not paused yet (no worker runs it): resume is refused for its state; once paused, a checkpoint it does not
    // have is refused naming from_checkpoint.
    const early = await cli('job', 'resume', id);
    expect(early.code).not.toBe(0);
    expect(early.stderr).toMatch(/INVALID_STATE: .*only a paused job can be resumed/);
    await stack.runtime.catalogue.db.update(jobs).set({ status: 'paused' }).where(eq(jobs.id, id));
    const bad = await cli('job', 'resume', id, '--from-checkpoint', '40');
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/from_checkpoint: a command job has no checkpoints/);
    const ok = await cli('job', 'resume', id);
    expect(ok.code, ok.stderr).toBe(0);
    const after = await stack.runtime.client.workflow.getHandle(jobWorkflowId(id)).fetchHistory();
    expect(after.events?.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'resumeJob')).toBe(true);
  });

  it('sends --from-checkpoint as a step when it is digits, else as a URI', () => {
    expect(resumeBody(undefined)).toEqual({});
    expect(resumeBody('40')).toEqual({ from_checkpoint: 40 });
    expect(resumeBody('s3://ckpt/checkpoints/dev/run/40')).toEqual({ from_checkpoint: 's3://ckpt/checkpoints/dev/run/40' });
  });
});

describe('hanzo-ml job submit --dry-run', () => {
  it("prints a command job's price and most it can cost, and queues nothing", async () => {
    const before = (await stack.runtime.catalogue.db.select().from(jobs)).length;
    const out = await cli('job', 'submit', '--config', SLEEPER, '--dry-run');
    expect(out.code, out.stderr).toBe(0);
    const answer = JSON.parse(out.stdout) as JobDryRun;
    const price = stack.loaded.config.scheduler.default_price_usd;
    expect(answer).toMatchObject({ dry_run: true, kind: 'command', estimate: null, known: { gpu_type: 'cpu', gpus: 0, price_per_gpu_hour_usd: price, max_gpu_hours: 2, max_usd: 2 * price } });
    expect((await stack.runtime.catalogue.db.select().from(jobs)).length).toBe(before);
  });
});
