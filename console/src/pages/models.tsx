// The registry: every registered model of the organization with its versions by stage (production first), each
// version linking to its lineage page. One call lists the models, one per model its versions.
import { useEffect, useState } from 'preact/hooks';
import type { ModelStage } from '../../../contracts/models.js';
import { api } from '../api.js';
import { time } from '../format.js';
import { linkHandler } from '../router.js';

interface ModelSummary {
  name: string;
  latest_version: number | null;
  production_version: number | null;
  created_at: string;
}
export interface VersionSummary {
  name: string;
  version: number;
  stage: ModelStage;
  status: string;
  checksum: string | null;
  formats: string[];
  created_at: string;
  created_by: string;
  stage_changed_at: string;
}

/** The order stages are shown in: what serves first, what was retired last. */
const STAGE_ORDER: ModelStage[] = ['production', 'staging', 'none', 'archived'];

export function ModelsPage() {
  const [models, setModels] = useState<ModelSummary[] | null>(null);
  const [versions, setVersions] = useState<Record<string, VersionSummary[]>>({});
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    (async () => {
      const { models: all } = await api<{ models: ModelSummary[] }>('GET', '/v1/models');
      const lists = await Promise.all(all.map((m) => api<{ versions: VersionSummary[] }>('GET', `/v1/models/${encodeURIComponent(m.name)}/versions`)));
      if (!live) return;
      setModels(all);
      setVersions(Object.fromEntries(all.map((m, i) => [m.name, lists[i]!.versions])));
    })().catch((e: Error) => live && setError(e.message));
    return () => {
      live = false;
    };
  }, []);

  return (
    <main>
      <h1>Models</h1>
      {error && <p class="error">{error}</p>}
      {models && models.length === 0 && <p class="muted">No registered models yet: a pipeline that passes its gate registers one.</p>}
      {models?.map((m) => (
        <section class="model" data-model={m.name}>
          <h2>
            {m.name}{' '}
            <span class="muted small">
              {m.production_version !== null ? `production: v${m.production_version}` : 'nothing in production'} · latest v{m.latest_version ?? '—'}
            </span>
          </h2>
          <div class="stages">
            {STAGE_ORDER.map((stage) => {
              const inStage = (versions[m.name] ?? []).filter((v) => v.stage === stage);
              return (
                <div class={`stage-col stage-${stage}`}>
                  <h3>
                    {stage} <span class="muted">({inStage.length})</span>
                  </h3>
                  {inStage.map((v) => (
                    <VersionCard v={v} />
                  ))}
                </div>
              );
            })}
          </div>
        </section>
      ))}
    </main>
  );
}

function VersionCard({ v }: { v: VersionSummary }) {
  const href = `/models/${encodeURIComponent(v.name)}/${v.version}`;
  return (
    <a class="version-card" data-version={v.version} href={href} onClick={linkHandler(href)}>
      <strong>v{v.version}</strong> <span class="muted small">{v.status === 'ready' ? v.formats.join(', ') : v.status}</span>
      <div class="muted small">
        {v.created_by} · {time(v.created_at)}
      </div>
      {v.checksum && <div class="small mono">{v.checksum.slice(0, 19)}…</div>}
    </a>
  );
}
