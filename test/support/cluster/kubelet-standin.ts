// The kubelet stand-in: the only component of the test cluster that is not the real thing.
//
// KWOK keeps the fake nodes Ready but runs no process for their pods. This process plays the kubelet of those
// nodes: it watches the pods bound to them and runs each container from its image with podman (an image not in local
// storage fails as ErrImagePull, then ImagePullBackOff; nothing is pulled) with the environment, volumes and security
// context a kubelet would give it; where podman or the images are missing, the harness selects the process fallback:
// images "pull" from a fixed list and each container's command runs as a local process group. It
//  reports status through pods/status (Running, then Succeeded or Failed with
// the exit code), finalises deletions (SIGTERM, SIGKILL after the grace period, removal with grace period 0) and
// serves the kubelet's /containerLogs endpoint so that `kubectl logs` and the API's pods/log work through the real
// API server. Started by startTestCluster (control-plane.ts):
//   node --import <repo>/node_modules/tsx/dist/esm/index.mjs kubelet-standin.ts <config.json>
import { readFileSync, writeFileSync } from 'node:fs';
import { CoreV1Api, KubeConfig, makeInformer, type V1Pod } from '@kubernetes/client-node';
import type { StandinConfig } from './standin/config.js';
import { startLogServer } from './standin/log-server.js';
import { PodRunner } from './standin/pod-runner.js';

const log = (message: string) => process.stderr.write(`${new Date().toISOString()} kubelet-standin: ${message}\n`);

async function main(configPath: string): Promise<void> {
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as StandinConfig;
  const kc = new KubeConfig();
  kc.loadFromFile(config.kubeconfig);
  const core = kc.makeApiClient(CoreV1Api);
  const runner = new PodRunner(core, {
    nodes: new Set(config.nodes),
    images: config.images,
    imageEnv: config.imageEnv,
    dir: config.dir,
    pgidFile: config.pgidFile,
    runtime: config.runtime,
    containersFile: config.containersFile,
    log,
  });
  writeFileSync(config.pgidFile, '');
  writeFileSync(config.containersFile, '');

  const server = await startLogServer({
    port: config.port,
    cert: config.tlsCert,
    key: config.tlsKey,
    clientCa: config.clientCa,
    lookup: (namespace, pod, container, previous) => runner.logTarget(namespace, pod, container, previous),
  });

  // Every pod in the cluster, filtered here: a test cluster holds few, and one watch survives nodes being added.
  const informer = makeInformer<V1Pod>(kc, '/api/v1/pods', () => core.listPodForAllNamespaces());
  const guarded = (what: string, fn: (pod: V1Pod) => void) => (pod: V1Pod) => {
    try {
      fn(pod);
    } catch (err) {
      log(`${what} ${pod.metadata?.namespace}/${pod.metadata?.name}: ${(err as Error).stack}`);
    }
  };
  informer.on('add', guarded('add', (pod) => runner.sync(pod)));
  informer.on('update', guarded('update', (pod) => runner.sync(pod)));
  informer.on('delete', guarded('delete', (pod) => runner.forget(pod)));
  let stopping = false;
  // The informer stops on an error (the API server restarting, say): say so and watch again.
  informer.on('error', (err: unknown) => {
    if (stopping) return;
    log(`pod watch failed, restarting in 1 s: ${(err as Error)?.message ?? err}`);
    setTimeout(() => informer.start().catch((e: Error) => log(`pod watch restart: ${e.message}`)), 1000);
  });
  await informer.start();
  writeFileSync(config.readyFile, String(process.pid));
  const how = config.runtime.kind === 'podman' ? 'running containers with podman' : `running containers as processes (${config.runtime.reason})`;
  log(`serving nodes ${config.nodes.join(', ')} on https://127.0.0.1:${config.port}, ${how}`);

  const stop = async () => {
    stopping = true;
    log('stopping: terminating every container');
    await informer.stop();
    server.close();
    await runner.shutdown(3000);
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
}

process.on('unhandledRejection', (err) => log(`unhandled rejection: ${(err as Error)?.stack ?? err}`));
main(process.argv[2] ?? '').catch((err: Error) => {
  log(`failed to start: ${err.stack}`);
  process.exit(1);
});
