import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
const kc = new KubeConfig(); kc.loadFromFile('/tmp/scratch-cluster-fXh6j9/kubeconfig');
const core = kc.makeApiClient(CoreV1Api);
const p = await core.readNamespacedPod({ name: 'p2', namespace: 'default' });
try { const r = await core.deleteNamespacedPod({ name: 'p2', namespace: 'default', body: { gracePeriodSeconds: 0, preconditions: { uid: p.metadata!.uid } } }); console.log('ok', r.metadata?.deletionTimestamp); } catch (e) { console.log('ERR', (e as any).code, (e as any).body ?? (e as Error).message); }
