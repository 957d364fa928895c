// The event stream benchmark: a real Postgres catalogue and a real Kafka broker (KRaft, the Apache jars the
// bootstrap caches), the product's own ingest statement (logMetrics) and relay (startEventRelay).
//   1. ingest cost: log-batch-sized metric writes with no stream events, with the per-step events, and with the
//      events while the relay publishes them: latency per write (p50/p99) and writes per second.
//   2. 10,000 hanzo.ml.metrics events/s offered for --seconds: the rate reaching a Kafka consumer and the
//      commit -> consumer latency (the event's commit-time stamp to its arrival at the consumer).
//   3. relay throughput: the outbox pre-filled, time to publish it all.
// Writes bench/results/events.json and events.md.
//
//   npx tsx bench/events/run.ts [--seconds 20] [--rate 10000]
import { writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { count, isNull } from 'drizzle-orm';
import { Kafka, logLevel } from 'kafkajs';
import { ConfigSchema } from '../../contracts/config.js';
import { kafkaTopic } from '../../contracts/events.js';
import { openCatalogue } from '../../db/client.js';
import { seedDevOrganization } from '../../db/repo/auth.js';
import { logMetrics } from '../../db/repo/metrics.js';
import { experiments, outbox, runs } from '../../db/schema/index.js';
import { startEventRelay } from '../../events/relay.js';
import { createLogger } from '../../lib/log.js';
import { startKafka } from '../../test/support/kafka.js';
import { startPostgres } from '../../test/support/postgres.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const arg = (flag: string, fallback: number): number => {
  const i = process.argv.indexOf(flag);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const SECONDS = arg('--seconds', 20);
const RATE = arg('--rate', 10_000);
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;

async function main(): Promise<void> {
  const pg = await startPostgres();
  const kafka = await startKafka();
  const url = await pg.createDatabase('events_bench');
  const cat = await openCatalogue({ url });
  const log = createLogger({ level: 'error', format: 'text' });
  const config = ConfigSchema.parse({ stream: { brokers: kafka.brokers, relay_batch: 1000 } });
  try {
    await seedDevOrganization(cat.db, 'dev', 'hanzo-ml-dev-token');
    await cat.db.insert(experiments).values({ id: 'bench', organizationId: 'dev', name: 'bench', artifactLocation: 'file:///tmp/bench' });
    const runIds = Array.from({ length: 8 }, (_, i) => `bench-run-${i}`);
    await cat.db.insert(runs).values(runIds.map((id) => ({ id, organizationId: 'dev', experimentId: 'bench', name: id, status: 'running' as const, userId: 'bench', artifactUri: 'file:///tmp/bench' })));
    const unpublished = async () => (await cat.db.select({ n: count() }).from(outbox).where(isNull(outbox.publishedAt)))[0]!.n;

    // 1. Ingest cost: one write = 10 keys at one step (one event), as a trainer's log-batch per step.
    let step = 0;
    const ingest = async (label: string, events: boolean, writes: number) => {
      const lat: number[] = [];
      const t0 = performance.now();
      for (let i = 0; i < writes; i++) {
        const s = step++;
        const points = Array.from({ length: 10 }, (_, k) => ({ key: `m${k}`, value: Math.sin(s + k), step: s, timestamp: Date.now() }));
        const t = performance.now();
        await logMetrics(cat.db, runIds[s % runIds.length]!, points, { events });
        lat.push(performance.now() - t);
      }
      const secs = (performance.now() - t0) / 1000;
      return { case: label, writes, p50_ms: round(pct(lat, 50)), p99_ms: round(pct(lat, 99)), writes_per_s: round(writes / secs, 0) };
    };
    const WRITES = 3000;
    await ingest('warm-up', true, 300);
    const ingestRows = [await ingest('no stream events', false, WRITES), await ingest('events to the outbox, no relay', true, WRITES)];
    const relay1 = await startEventRelay({ db: cat.db, config, log, idleMs: 20 });
    ingestRows.push(await ingest('events to the outbox, relay publishing', true, WRITES));
    while ((await unpublished()) > 0) await new Promise((r) => setTimeout(r, 100));

    // 2. Offered load of RATE metric events/s: every 10 ms one write of RATE/100 steps (one event per step).
    const client = new Kafka({ clientId: 'events-bench', brokers: [kafka.brokers], logLevel: logLevel.NOTHING });
    const consumer = client.consumer({ groupId: `bench-${Date.now()}`, maxWaitTimeInMs: 20 });
    await consumer.connect();
    await consumer.subscribe({ topics: [kafkaTopic('hanzo.ml', 'metrics')], fromBeginning: false });
    const latencies: number[] = [];
    let received = 0;
    let firstAt = 0;
    let lastAt = 0;
    const startedAt = Date.now();
    await consumer.run({
      eachBatchAutoResolve: true,
      eachBatch: async ({ batch }) => {
        const now = Date.now();
        for (const m of batch.messages) {
          const env = JSON.parse(m.value!.toString()) as { data: { timestamp: string; step: number } };
          if (env.data.step < 1_000_000) continue; // phase 1 leftovers
          received++;
          latencies.push(now - Date.parse(env.data.timestamp));
          firstAt ||= now;
          lastAt = now;
        }
      },
    });
    await new Promise((r) => setTimeout(r, 3000)); // group join
    const perTick = Math.max(1, Math.round(RATE / 100));
    let offered = 0;
    let behind = 0;
    step = 1_000_000;
    const loadStart = performance.now();
    for (let tick = 0; tick < SECONDS * 100; tick++) {
      const due = loadStart + tick * 10;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      else behind++;
      const points = Array.from({ length: perTick }, () => {
        const s = step++;
        return { key: 'train/loss', value: 1 / (s - 999_999), step: s, timestamp: Date.now() };
      });
      await logMetrics(cat.db, runIds[tick % runIds.length]!, points);
      offered += perTick;
    }
    const offerSecs = (performance.now() - loadStart) / 1000;
    const deadline = Date.now() + 120_000;
    while (received < offered && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    await consumer.disconnect();
    await relay1.stop();
    const load = {
      offered_rate_per_s: RATE,
      seconds: SECONDS,
      events_committed: offered,
      achieved_commit_rate_per_s: round(offered / offerSecs, 0),
      ticks_late: behind,
      events_received: received,
      consumer_rate_per_s: round(received / Math.max(0.001, (lastAt - firstAt) / 1000), 0),
      latency_ms: { p50: pct(latencies, 50), p95: pct(latencies, 95), p99: pct(latencies, 99), max: pct(latencies, 100) },
      since_start_s: round((Date.now() - startedAt) / 1000, 1),
    };

    // 3. Relay throughput: 100,000 events waiting, one relay, time to publish all.
    const BACKLOG = 100_000;
    for (let i = 0; i < BACKLOG / 1000; i++) {
      const points = Array.from({ length: 1000 }, () => ({ key: 'x', value: 1, step: step++, timestamp: Date.now() }));
      await logMetrics(cat.db, runIds[i % runIds.length]!, points);
    }
    const t = performance.now();
    const relay2 = await startEventRelay({ db: cat.db, config, log, idleMs: 20 });
    while ((await unpublished()) > 0) await new Promise((r) => setTimeout(r, 50));
    const drainSecs = (performance.now() - t) / 1000;
    await relay2.stop();
    const relay = { backlog: BACKLOG, relay_batch: config.stream.relay_batch, seconds: round(drainSecs), events_per_s: round(BACKLOG / drainSecs, 0) };

    const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? '', load_average_1m: round(loadavg()[0]!), node: process.version };
    const result = { date: new Date().toISOString(), machine, ingest: ingestRows, load, relay };
    writeFileSync(join(root, 'bench/results/events.json'), JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(root, 'bench/results/events.md'), markdown(result));
    process.stdout.write(markdown(result));
  } finally {
    await cat.close();
    await kafka.stop();
    await pg.stop();
  }
}

function markdown(r: { date: string; machine: Record<string, unknown>; ingest: Record<string, unknown>[]; load: Record<string, unknown> & { latency_ms: Record<string, number> }; relay: Record<string, unknown> }): string {
  const l = r.load;
  return [
    `# Event stream benchmark (${r.date})`,
    '',
    `Machine: ${JSON.stringify(r.machine)}. Postgres catalogue, one Kafka KRaft broker, all on this machine.`,
    '',
    '## Ingest cost (a write = 10 metric keys at one step; one event per step)',
    '',
    '| case | writes | p50 ms | p99 ms | writes/s |',
    '|---|---|---|---|---|',
    ...r.ingest.map((x) => `| ${String(x.case)} | ${String(x.writes)} | ${String(x.p50_ms)} | ${String(x.p99_ms)} | ${String(x.writes_per_s)} |`),
    '',
    `## ${String(l.offered_rate_per_s)} hanzo.ml.metrics events/s offered for ${String(l.seconds)} s`,
    '',
    `Committed ${String(l.events_committed)} events at ${String(l.achieved_commit_rate_per_s)}/s (${String(l.ticks_late)} of ${Number(l.seconds) * 100} 10-ms ticks started late); ` +
      `the consumer received ${String(l.events_received)} at ${String(l.consumer_rate_per_s)}/s.`,
    '',
    '| commit -> consumer latency | p50 | p95 | p99 | max |',
    '|---|---|---|---|---|',
    `| ms | ${l.latency_ms.p50} | ${l.latency_ms.p95} | ${l.latency_ms.p99} | ${l.latency_ms.max} |`,
    '',
    '## Relay throughput',
    '',
    `${String(r.relay.backlog)} events waiting in the outbox were published in ${String(r.relay.seconds)} s: ${String(r.relay.events_per_s)} events/s (relay_batch ${String(r.relay.relay_batch)}).`,
    '',
  ].join('\n');
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
