// `hanzo-ml model register`: POST /v1/models/{name}/versions answers 202 with the version pending_registration
// while its files are copied under the version's prefix; the command then reads the version until it is ready,
// and fails with the registry's message when the registration failed.
import { ApiClientError, type ApiClient } from './api-client.js';

export interface RegisteredVersionView {
  name: string;
  version: number;
  status: 'pending_registration' | 'ready' | 'failed_registration';
  status_message: string | null;
  checksum: string | null;
  [key: string]: unknown;
}

export async function registerModelVersion(
  api: ApiClient,
  o: { name: string; run_id: string; artifact_path: string; description?: string; wait?: boolean; timeoutMs?: number; pollMs?: number },
): Promise<RegisteredVersionView> {
  const path = `/v1/models/${encodeURIComponent(o.name)}/versions`;
  let v = await api.post<RegisteredVersionView>(path, { run_id: o.run_id, artifact_path: o.artifact_path, ...(o.description !== undefined ? { description: o.description } : {}) });
  if (o.wait === false) return v;
  const deadline = Date.now() + (o.timeoutMs ?? 3_600_000);
  while (v.status === 'pending_registration') {
    if (Date.now() > deadline) throw new ApiClientError(0, 'TIMEOUT', `version ${v.version} of model "${o.name}" is still being registered; \`hanzo-ml model versions ${o.name}\` shows when it is ready`);
    await new Promise((r) => setTimeout(r, o.pollMs ?? 1000));
    v = await api.get<RegisteredVersionView>(`${path}/${v.version}`);
  }
  if (v.status === 'failed_registration') throw new ApiClientError(409, 'FAILED_REGISTRATION', v.status_message ?? `version ${v.version} of model "${o.name}" failed registration`);
  return v;
}
