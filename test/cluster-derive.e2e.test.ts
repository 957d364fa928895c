// A derived dataset version on Kubernetes end to end: `hanzo-ml serve` and `hanzo-ml worker` apart, the
// prepare-dataset job a batch/v1 Job that enters through its organization's Kueue queue, its pod fetching the
// parent version's split files from S3 (moto_server) with the job's own credentials and uploading the new version's
// files there. The one stand-in is the kubelet's (test/support/cluster/): it runs the pod from the trainer image
// with podman (a local process where podman is missing).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { V1Job } from '@kubernetes/client-node';
import { TERMINAL_JOB_STATUSES, type JobStatus } from '../contracts/jobs.js';
import { findClusterTools, findKueue } from './support/cluster/tools.js';
import { JOBS_NAMESPACE, startClusterStack, type ClusterStack } from './support/cluster-stack.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const ready = findClusterTools() !== null && findKueue() !== null;
const chat = (q: string, a: string) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] });
/** 30 distinct records, 6 of them twice (the upload drops those), 4 that differ only in an e-mail address. */
const RAW = [
  ...Array.from({ length: 30 }, (_, i) => chat(`Where is my parcel, order ${i}?`, `It left the depot on day ${i}.`)),
  ...Array.from({ length: 6 }, (_, i) => chat(`Where is my parcel, order ${i}?`, `It left the depot on day ${i}.`)),
  ...Array.from({ length: 4 }, (_, i) => chat(`Write to buyer${i}@example.com`, 'Done.')),
];

describe.skipIf(!ready)('dataset derive on Kubernetes (real control plane and Kueue, S3, serve and worker apart)', () => {
  let stack: ClusterStack;

  beforeAll(async () => {
    stack = await startClusterStack({ kueue: true, config: { scheduler: { gpu_types: ['a100'], quotas: { dev: { max_gpus: 8, max_concurrent_jobs: 4 } } } } });
  }, 10 * 60_000);

  afterAll(async () => {
    await stack?.stop();
  });

  it('runs prepare-dataset as a Kueue-admitted Job whose pod reads the parent from S3; the new version is ready with its lineage', { timeout: 20 * 60_000 }, async () => {
    const upload = await fetch(`${stack.apiUrl}/v1/datasets?name=k8s-derive&format=jsonl&wait=true`, { method: 'POST', headers: { authorization: `Bearer ${stack.token}` }, body: RAW.join('\n') });
    const raw = (await upload.json()) as Json;
    expect(upload.status, JSON.stringify(raw)).toBe(201);
    expect(raw.num_records).toBe(34);

    const accepted = await stack.api<Json>('POST', `/v1/datasets/${raw.id}/derive`, { operations: [{ op: 'mask_pii' }, { op: 'dedup_exact' }] });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);

    // Every state the derive's Job is seen in: created suspended in its queue, then admitted (Kueue unsuspends it).
    const seen: V1Job[] = [];
    let job: Json = {};
    const deadline = Date.now() + 15 * 60_000;
    while (!TERMINAL_JOB_STATUSES.includes(job.status as JobStatus)) {
      if (Date.now() > deadline) throw new Error(`derive job ${accepted.body.job_id} did not end (${job.status}); logs in ${stack.home}/logs`);
      const list = await stack.batch.listNamespacedJob({ namespace: JOBS_NAMESPACE });
      seen.push(...list.items.filter((j) => j.metadata?.labels?.['hanzo-ml.dev/kind'] === 'prepare-dataset'));
      job = (await stack.api<Json>('GET', `/v1/jobs/${accepted.body.job_id}`)).body;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(job.status, JSON.stringify(job)).toBe('succeeded');
    expect(job.type).toBe('data_preparation');

    // The upload's own preparation Job may still be listed beside the derive's.
    const names = new Set(seen.map((j) => j.metadata!.name!));
    expect([...names].filter((n) => n !== `dataset-prep-${raw.id}`)).toEqual([`dataset-prep-${accepted.body.dataset_id}`]);
    const derive = seen.filter((j) => j.metadata!.name === `dataset-prep-${accepted.body.dataset_id}`);
    expect(derive[0]!.metadata!.labels!['kueue.x-k8s.io/queue-name'], 'entered through its organization\'s queue').toBeTruthy();
    expect(derive.some((j) => j.spec?.suspend === false), 'admitted by Kueue').toBe(true);

    const version = (await stack.api<Json>('GET', `/v1/datasets/${accepted.body.dataset_id}`)).body;
    expect(version.lineage.parent_datasets).toEqual([raw.id]);
    // Masked, the four e-mail records are one record three times over: exact dedup drops three.
    expect(version.lineage.operations.map((o: Json) => [o.op, o.records_in, o.removed, o.records_out])).toEqual([
      ['mask_pii', 34, 0, 34],
      ['dedup_exact', 34, 3, 31],
    ]);
    expect(version.num_records).toBe(31);
    expect(version.metadata.report.pii_redactions.email).toBe(4);
    // The files the pod wrote, copied under the organization's prefix of the datasets bucket.
    for (const split of ['train', 'validation', 'test']) expect(version.splits[split].path).toMatch(new RegExp(`^s3://hanzo-ml-datasets/dev/k8s-derive/${version.id}/`));
    const preview = (await stack.api<Json>('GET', `/v1/datasets/${version.id}/preview?split=train&n=100`)).body;
    expect(JSON.stringify(preview)).toContain('[REDACTED:email]');
    expect(JSON.stringify(preview)).not.toContain('@example.com');
  });
});
