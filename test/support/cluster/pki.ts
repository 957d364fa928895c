// The test cluster's certificates, made with openssl: one CA signs the API server's serving certificate, the
// admin client certificate every component uses, the API server's client certificate towards kubelets, and the
// kubelet stand-in's serving certificate. P-256 keys, because RSA key generation costs seconds on a busy machine.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface ClusterPki {
  caCert: string;
  caKey: string;
  apiserverCert: string;
  apiserverKey: string;
  adminCert: string;
  adminKey: string;
  /** The API server's client certificate when it calls a kubelet (pods/log). */
  kubeletClientCert: string;
  kubeletClientKey: string;
  /** The kubelet stand-in's serving certificate (the API server verifies it against the CA). */
  kubeletServingCert: string;
  kubeletServingKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

export const LOOPBACK_SANS = 'IP:127.0.0.1,DNS:localhost';

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

function newKey(path: string): void {
  openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', path]);
}

/** A leaf certificate signed by the CA: `usage` is serverAuth and/or clientAuth. */
export function issue(dir: string, name: string, subject: string, usage: string, sans?: string): { cert: string; key: string } {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const cert = join(dir, `${name}.crt`);
  const ext = join(dir, `${name}.ext`);
  newKey(key);
  openssl(['req', '-new', '-key', key, '-out', csr, '-subj', subject]);
  const extLines = ['basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment', `extendedKeyUsage=${usage}`];
  if (sans) extLines.push(`subjectAltName=${sans}`);
  writeFileSync(ext, extLines.join('\n') + '\n');
  const ca = [join(dir, 'ca.crt'), join(dir, 'ca.key')];
  openssl(['x509', '-req', '-in', csr, '-CA', ca[0]!, '-CAkey', ca[1]!, '-set_serial', String(Date.now() * 1000 + Math.floor(Math.random() * 1000)), '-days', '7', '-out', cert, '-extfile', ext]);
  return { cert, key };
}

export function makeClusterPki(dir: string): ClusterPki {
  const caKey = join(dir, 'ca.key');
  const caCert = join(dir, 'ca.crt');
  newKey(caKey);
  openssl([
    'req', '-x509', '-new', '-key', caKey, '-out', caCert, '-days', '7', '-subj', '/CN=hanzo-ml-test-cluster-ca',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
  const apiserver = issue(dir, 'apiserver', '/CN=kube-apiserver', 'serverAuth', LOOPBACK_SANS);
  const admin = issue(dir, 'admin', '/O=system:masters/CN=hanzo-ml-test-admin', 'clientAuth');
  const kubeletClient = issue(dir, 'apiserver-kubelet-client', '/O=system:masters/CN=kube-apiserver-kubelet-client', 'clientAuth');
  const kubeletServing = issue(dir, 'kubelet-serving', '/CN=kubelet-standin', 'serverAuth', LOOPBACK_SANS);
  const serviceAccountKey = join(dir, 'sa.key');
  const serviceAccountPub = join(dir, 'sa.pub');
  newKey(serviceAccountKey);
  openssl(['pkey', '-in', serviceAccountKey, '-pubout', '-out', serviceAccountPub]);
  return {
    caCert,
    caKey,
    apiserverCert: apiserver.cert,
    apiserverKey: apiserver.key,
    adminCert: admin.cert,
    adminKey: admin.key,
    kubeletClientCert: kubeletClient.cert,
    kubeletClientKey: kubeletClient.key,
    kubeletServingCert: kubeletServing.cert,
    kubeletServingKey: kubeletServing.key,
    serviceAccountKey,
    serviceAccountPub,
  };
}
