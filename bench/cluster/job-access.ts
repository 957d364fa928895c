// Cost of per-job object-store access on job start: the worker's STS AssumeRole of the job's organization's role
// with its session policy (ActivityDeps.jobSecrets, jobs/storage-access.ts), against moto_server with
// IAM enforcement on (the store the tests prove refusals against), and the job's first request with what it got.
//   npx tsx bench/cluster/job-access.ts [--passes 5] [--jobs 40]
// Writes bench/results/job-access.{json,md}.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { loadConfig, repoRoot } from '../../lib/config.js';
import { withStorageAccess } from '../../jobs/deps.js';
import { organizationStoragePolicy } from '../../jobs/storage-access.js';
import { enforceIam, motoPython, startMoto } from '../../test/support/moto.js';

const arg = (name: string, d: number) => Number(process.argv[process.argv.indexOf(name) + 1] || d) || d;
const passes = arg('--passes', 5);
const jobs = arg('--jobs', 40);
const ORGS = ['orga', 'orgb', 'orgc', 'orgd'];
const CONCURRENT = 16;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const round = (x: number) => Number(x.toFixed(2));

async function main(): Promise<void> {
  const probe = loadConfig({});
  const bin = probe.bootstrap.moto_server;
  if (!bin) throw new Error('moto_server is missing: run scripts/bootstrap.sh --tests');
  const loadBefore = loadavg();
  const moto = await startMoto(bin);
  try {
    const base = loadConfig({
      HANZO_ML_STORAGE_ENDPOINT: moto.endpoint,
      HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}',
      HANZO_ML_STORAGE_ACCESS_KEY: 'set-below',
      HANZO_ML_STORAGE_SECRET_KEY: 'set-below',
    }).config;
    const { datasets, models, checkpoints } = base.storage.buckets;
    const spec = {
      endpoint: moto.endpoint,
      buckets: [datasets, models, checkpoints],
      objects: ORGS.map((o) => ({ bucket: datasets, key: `${o}/train.jsonl`, body: 'x\n' })),
      worker: 'hanzo-ml-worker',
      roles: Object.fromEntries(ORGS.map((o) => [`hanzo-ml-jobs-${o}`, organizationStoragePolicy(base, o)])),
    };
    const worker = JSON.parse(execFileSync(motoPython(bin), [join(repoRoot, 'test/support/moto_iam.py')], { input: JSON.stringify(spec), encoding: 'utf8' })) as { access_key: string; secret_key: string };
    const config = { ...base, storage: { ...base.storage, access_key: worker.access_key, secret_key: worker.secret_key } };
    await enforceIam(moto.endpoint);
    const mint = withStorageAccess(async () => ({}), config);
    const job = (pass: number, i: number) => ({ name: `bench-${pass}-${i}`, organizationId: ORGS[i % ORGS.length]!, runId: `run-${pass}-${i}` });

    const mintMs: number[] = [];
    const firstReadMs: number[] = [];
    const concurrentMs: number[] = [];
    // Pass 0 warms the SDK's client and moto's first request paths; it is not counted.
    for (let pass = 0; pass <= passes; pass++) {
      const perJob: number[] = [];
      const reads: number[] = [];
      for (let i = 0; i < jobs; i++) {
        const t0 = performance.now();
        const env = await mint(job(pass, i));
        perJob.push(performance.now() - t0);
        const s3 = new S3Client({ endpoint: moto.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY!, sessionToken: env.AWS_SESSION_TOKEN } });
        const t1 = performance.now();
        await s3.send(new GetObjectCommand({ Bucket: datasets, Key: `${job(pass, i).organizationId}/train.jsonl` })).then((r) => r.Body?.transformToString());
        reads.push(performance.now() - t1);
        s3.destroy();
      }
      const t2 = performance.now();
      await Promise.all(Array.from({ length: CONCURRENT }, (_, i) => mint(job(pass, jobs + i))));
      const batch = performance.now() - t2;
      if (pass === 0) continue;
      mintMs.push(median(perJob));
      firstReadMs.push(median(reads));
      concurrentMs.push(batch / CONCURRENT);
      console.error(`pass ${pass}: mint ${median(perJob).toFixed(1)} ms/job, first read ${median(reads).toFixed(1)} ms, ${CONCURRENT} at once ${(batch / CONCURRENT).toFixed(1)} ms/job`);
    }
    const results = {
      passes,
      jobs_per_pass: jobs,
      store: 'moto_server (IAM enforcement on), same machine',
      machine: `${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB`,
      load_average_before: loadBefore.map(round),
      mint_ms_per_job_median_by_pass: mintMs.map(round),
      mint_ms_per_job: round(median(mintMs)),
      first_read_with_minted_credentials_ms: round(median(firstReadMs)),
      concurrent_mints: CONCURRENT,
      concurrent_mint_ms_per_job: round(median(concurrentMs)),
      load_average_after: loadavg().map(round),
    };
    const out = join(repoRoot, 'bench/results');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'job-access.json'), JSON.stringify(results, null, 2) + '\n');
    writeFileSync(
      join(out, 'job-access.md'),
      [
        '# Per-job object-store access: cost on job start',
        '',
        `The worker mints each job's credentials when it prepares the job: STS AssumeRole of the organization's role with the job's session policy. Against moto_server with IAM enforcement on, on this machine (${results.machine}); load average (1/5/15 min) ${results.load_average_before.join(' / ')} before, ${results.load_average_after.join(' / ')} after. ${jobs} jobs per pass over ${ORGS.length} organizations, median per pass, median of ${passes} passes after one warm-up.`,
        '`npx tsx bench/cluster/job-access.ts`. Against AWS STS add the network round trip to the STS endpoint; the mint happens once per job attempt, beside the job\'s Secret, Job and pod creation.',
        '',
        '| what | ms per job |',
        '| --- | ---: |',
        `| AssumeRole (mint), one job at a time | ${results.mint_ms_per_job} |`,
        `| AssumeRole, ${CONCURRENT} jobs at once (wall time / jobs) | ${results.concurrent_mint_ms_per_job} |`,
        `| the job's first GetObject with the minted credentials | ${results.first_read_with_minted_credentials_ms} |`,
        '',
        `Per pass (mint, ms per job): ${results.mint_ms_per_job_median_by_pass.join(', ')}.`,
        '',
      ].join('\n'),
    );
    console.log(JSON.stringify(results, null, 2));
  } finally {
    moto.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    console.error(err.stack);
    process.exit(1);
  },
);
