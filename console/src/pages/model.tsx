// One model version: its lineage as a graph (dataset version and its parents -> pipeline and jobs -> run ->
// checkpoints -> formats -> stage history), each node linking to its page, and the same facts as tables below it.
import type { ModelLineage } from '../../../contracts/models.js';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { time } from '../format.js';
import { layoutGraph, lineageGraph, NODE_H, NODE_W, type PlacedNode } from '../graph.js';
import { linkHandler } from '../router.js';

export function ModelVersionPage({ name, version }: { name: string; version: string }) {
  const [lineage, setLineage] = useState<ModelLineage | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setLineage(null);
    api<ModelLineage>('GET', `/v1/models/${encodeURIComponent(name)}/versions/${encodeURIComponent(version)}/lineage`)
      .then((l) => (setLineage(l), setError(null)))
      .catch((e: Error) => setError(e.message));
  }, [name, version]);

  return (
    <main>
      <h1>
        <a href="/models" onClick={linkHandler('/models')}>
          Models
        </a>{' '}
        / {name} v{version} {lineage && <span class={`status stage-${lineage.stage}`}>{lineage.stage}</span>}
      </h1>
      {error && <p class="error">{error}</p>}
      {lineage && (
        <>
          <h2>Lineage</h2>
          <LineageGraph lineage={lineage} />
          <h2>Formats</h2>
          <table class="formats">
            <thead>
              <tr>
                <th>Format</th>
                <th>Checksum (manifest)</th>
                <th>Size</th>
                <th>Files</th>
              </tr>
            </thead>
            <tbody>
              {lineage.formats.map((f) => (
                <tr>
                  <td>{f.name}</td>
                  <td class="mono small">{f.checksum}</td>
                  <td>{f.size_bytes.toLocaleString()} B</td>
                  <td>{f.files}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <h2>Stage history</h2>
          <table class="stage-history">
            <thead>
              <tr>
                <th>Stage</th>
                <th>From</th>
                <th>By</th>
                <th>When</th>
                <th>Reason</th>
              </tr>
            </thead>
            <tbody>
              {lineage.stages.map((s) => (
                <tr>
                  <td>{s.stage}</td>
                  <td>{s.from ?? '—'}</td>
                  <td>{s.actor}</td>
                  <td>{time(s.at)}</td>
                  <td>{s.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </main>
  );
}

function LineageGraph({ lineage }: { lineage: ModelLineage }) {
  const { nodes, edges } = lineageGraph(lineage);
  const layout = layoutGraph(nodes, edges);
  return (
    <div class="graph-scroll">
      <svg class="lineage" data-testid="lineage-graph" width={layout.width} height={layout.height} viewBox={`0 0 ${layout.width} ${layout.height}`} role="img" aria-label={`lineage of ${lineage.name} v${lineage.version}`}>
        {layout.edges.map((e) => (
          <path class="edge" d={e.d} />
        ))}
        {layout.nodes.map((n) => (
          <Node n={n} />
        ))}
      </svg>
    </div>
  );
}

function Node({ n }: { n: PlacedNode }) {
  const box = (
    <g class={`node node-${n.kind}`} data-node={n.id} transform={`translate(${n.x},${n.y})`}>
      <rect width={NODE_W} height={NODE_H} rx={6} />
      <text x={8} y={17} class="node-title">
        {n.title}
      </text>
      {n.lines.slice(0, 3).map((l, i) => (
        <text x={8} y={34 + i * 15} class="node-line">
          {l}
        </text>
      ))}
    </g>
  );
  if (!n.href) return box;
  // Console pages change without a reload; the MLflow UI and API documents are their own pages.
  const inConsole = n.href.startsWith('/') && !n.href.startsWith('/mlflow/') && !n.href.startsWith('/v1/');
  return (
    <a href={n.href} onClick={inConsole ? linkHandler(n.href) : undefined}>
      {box}
    </a>
  );
}
