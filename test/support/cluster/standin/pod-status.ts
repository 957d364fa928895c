// The pod status a kubelet would report, computed from what the stand-in knows of the pod's containers.
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { qualifiedImage } from './config.js';

const NODE_IP = '127.0.0.1';
export const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

export type ContainerState =
  | { kind: 'waiting'; reason: string; message?: string }
  | { kind: 'running'; startedAt: string }
  | { kind: 'terminated'; exitCode: number; signal?: number; reason: string; message?: string; startedAt?: string; finishedAt: string };

export interface ContainerRun {
  spec: V1Container;
  state: ContainerState;
  lastState?: ContainerState;
  restartCount: number;
  /** Process group of the running instance. */
  pgid: number | null;
  /** The podman container of the running instance (podman runtime). */
  containerName?: string | null;
  exited: Promise<void> | null;
  timer?: NodeJS.Timeout;
}

export interface PodRun {
  uid: string;
  namespace: string;
  name: string;
  node: string;
  pod: V1Pod;
  dir: string;
  startTime: string;
  containers: ContainerRun[];
  deleting: boolean;
  gone: boolean;
  conditionTimes: Map<string, { status: string; time: string }>;
  statusWrites: Promise<void>;
  /** Host directory of each volume, once prepared. */
  volumes: Map<string, string>;
  retry?: NodeJS.Timeout;
}

function podPhase(run: PodRun): string {
  const kinds = run.containers.map((c) => c.state.kind);
  if (kinds.length && kinds.every((k) => k === 'terminated')) {
    return run.containers.every((c) => c.state.kind === 'terminated' && c.state.exitCode === 0) ? 'Succeeded' : 'Failed';
  }
  // A container that ran once keeps the pod Running through a restart back-off.
  return run.containers.some((c) => c.state.kind !== 'waiting' || c.restartCount > 0) ? 'Running' : 'Pending';
}

function stateJson(s: ContainerState): Record<string, unknown> {
  // Strategic merge keeps keys the patch leaves out: name the other two states null so exactly one remains.
  if (s.kind === 'waiting') return { waiting: { reason: s.reason, message: s.message }, running: null, terminated: null };
  if (s.kind === 'running') return { running: { startedAt: s.startedAt }, waiting: null, terminated: null };
  const { exitCode, signal, reason, message, startedAt, finishedAt } = s;
  return { terminated: { exitCode, signal, reason, message, startedAt, finishedAt }, waiting: null, running: null };
}

export function podStatus(run: PodRun): Record<string, unknown> {
  const phase = podPhase(run);
  const terminal = phase === 'Succeeded' || phase === 'Failed';
  const unready = run.containers.filter((c) => c.state.kind !== 'running').map((c) => c.spec.name);
  const ready = unready.length === 0 && !run.deleting;
  const condition = (type: string, ok: boolean, reason?: string, message?: string) => {
    const status = ok ? 'True' : 'False';
    const prev = run.conditionTimes.get(type);
    if (prev?.status !== status) run.conditionTimes.set(type, { status, time: now() });
    return { type, status, reason: ok ? undefined : reason, message: ok ? undefined : message, lastProbeTime: null, lastTransitionTime: run.conditionTimes.get(type)!.time };
  };
  const notReadyReason = terminal ? 'PodCompleted' : 'ContainersNotReady';
  const notReadyMessage = terminal ? undefined : `containers with unready status: [${unready.join(' ')}]`;
  return {
    phase,
    hostIP: NODE_IP,
    hostIPs: [{ ip: NODE_IP }],
    podIP: NODE_IP,
    podIPs: [{ ip: NODE_IP }],
    startTime: run.startTime,
    conditions: [
      condition('PodReadyToStartContainers', !terminal, 'PodCompleted'),
      condition('Initialized', true),
      condition('ContainersReady', ready, notReadyReason, notReadyMessage),
      condition('Ready', ready, notReadyReason, notReadyMessage),
    ],
    containerStatuses: run.containers.map((c) => ({
      name: c.spec.name,
      image: c.spec.image,
      imageID: c.state.kind === 'waiting' && c.restartCount === 0 ? '' : qualifiedImage(c.spec.image ?? ''),
      containerID: c.state.kind === 'waiting' && c.restartCount === 0 ? undefined : `standin://${run.uid}-${c.spec.name}-${c.restartCount}`,
      ready: c.state.kind === 'running' && !run.deleting,
      started: c.state.kind === 'running',
      restartCount: c.restartCount,
      state: stateJson(c.state),
      lastState: c.lastState ? stateJson(c.lastState) : {},
    })),
  };
}
