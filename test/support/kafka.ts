// A real single-node Apache Kafka broker in KRaft mode for tests: the jars scripts/bootstrap.sh --tests cached
// from Maven Central (test/kafka/pom.xml), on Java 17, listening on loopback ports. It can be stopped hard and
// started again on the same log directory, as a broker restart.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testConfig } from './config.js';
import { freePort } from './ports.js';

export interface TestKafka {
  brokers: string;
  /** SIGKILL: a crash, nothing flushed */
  kill(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function kafkaLibs(): string | null {
  const libs = testConfig().bootstrap.kafka_libs;
  return libs && existsSync(libs) ? libs : null;
}

export const KAFKA_MISSING = 'the Kafka jars are not installed: run scripts/bootstrap.sh --tests';

async function waitForPort(port: number, deadlineMs: number, logPath: string): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = createConnection({ host: '127.0.0.1', port }, () => {
        s.end();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`kafka did not listen on ${port}: ${readFileSync(logPath, 'utf8').slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function startKafka(): Promise<TestKafka> {
  const libs = kafkaLibs();
  if (!libs) throw new Error(KAFKA_MISSING);
  const dir = mkdtempSync(join(tmpdir(), 'hanzo-ml-kafka-'));
  const [port, controller] = [await freePort(), await freePort()];
  const props = join(dir, 'server.properties');
  writeFileSync(
    props,
    [
      'process.roles=broker,controller',
      'node.id=1',
      `controller.quorum.voters=1@127.0.0.1:${controller}`,
      `listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controller}`,
      `advertised.listeners=PLAINTEXT://127.0.0.1:${port}`,
      'controller.listener.names=CONTROLLER',
      'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
      'inter.broker.listener.name=PLAINTEXT',
      `log.dirs=${join(dir, 'logs')}`,
      'num.partitions=3',
      'offsets.topic.replication.factor=1',
      'transaction.state.log.replication.factor=1',
      'transaction.state.log.min.isr=1',
      'share.coordinator.state.topic.replication.factor=1',
      'share.coordinator.state.topic.min.isr=1',
      'group.initial.rebalance.delay.ms=0',
      'auto.create.topics.enable=false',
    ].join('\n') + '\n',
  );
  const cp = `${libs}/*`;
  const java = ['-Xms256m', '-Xmx512m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1', '-cp', cp];
  const id = execFileSync('java', [...java, 'kafka.tools.StorageTool', 'random-uuid'], { encoding: 'utf8' }).trim();
  execFileSync('java', [...java, 'kafka.tools.StorageTool', 'format', '-t', id, '-c', props], { stdio: 'ignore' });
  const logPath = join(dir, 'broker.log');
  let child: ChildProcess | null = null;
  const start = async (): Promise<void> => {
    const log = openSync(logPath, 'a');
    child = spawn('java', [...java, `-Dkafka.logs.dir=${dir}`, 'kafka.Kafka', props], { stdio: ['ignore', log, log] });
    closeSync(log);
    await waitForPort(port, 90_000, logPath);
  };
  const halt = async (signal: NodeJS.Signals): Promise<void> => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill(signal);
    });
  };
  await start();
  return { brokers: `127.0.0.1:${port}`, start, kill: () => halt('SIGKILL'), stop: () => halt('SIGTERM') };
}
