// The lineage of a model version as a graph (pure: no DOM, so the tests import it): one node per link of the chain
// the API answers, edges from what came first to what it made, laid out in columns by kind, left to right.
import type { ModelLineage } from '../../contracts/models.js';

export const NODE_KINDS = ['source', 'dataset', 'pipeline', 'job', 'run', 'checkpoint', 'format', 'stage'] as const;
export type NodeKind = (typeof NODE_KINDS)[number];

export interface GraphNode {
  id: string;
  kind: NodeKind;
  title: string;
  /** up to three short lines under the title */
  lines: string[];
  /** its page: a console path, the MLflow UI or an API document */
  href: string | null;
}
export interface GraphEdge {
  from: string;
  to: string;
}
export interface PlacedNode extends GraphNode {
  x: number;
  y: number;
}
export interface Layout {
  nodes: PlacedNode[];
  edges: (GraphEdge & { d: string })[];
  width: number;
  height: number;
}

export const NODE_W = 160;
export const NODE_H = 64;
const COL_GAP = 26;
const ROW_GAP = 16;
const PAD = 10;

const hash = (h: string, n = 12) => `${h.replace(/^sha256:/, '').slice(0, n)}…`;
const bytes = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`);
const day = (iso: string) => iso.slice(0, 16).replace('T', ' ');

/** The nodes and edges of a version's lineage. */
export function lineageGraph(l: ModelLineage): { nodes: GraphNode[]; edges: GraphEdge[] } {
  const nodes: GraphNode[] = [];
  const edges: GraphEdge[] = [];
  const add = (n: GraphNode, from: (string | null)[] = []) => {
    nodes.push(n);
    for (const f of from) if (f) edges.push({ from: f, to: n.id });
    return n.id;
  };
  const datasetNode = (d: NonNullable<ModelLineage['dataset']>['parents'][number], kind: 'source' | 'dataset'): GraphNode => ({
    id: `dataset:${d.id}`,
    kind,
    title: `${d.name} v${d.version}`,
    lines: [`sha256 ${hash(d.sha256)}`, `${d.num_records} records`],
    href: `/v1/datasets/${encodeURIComponent(d.id)}`,
  });

  let last: string | null = null;
  if (l.dataset) {
    const parents = l.dataset.parents.map((p) => add(datasetNode(p, 'source')));
    last = add(datasetNode(l.dataset, 'dataset'), parents);
  }
  if (l.pipeline)
    last = add({ id: `pipeline:${l.pipeline.id}`, kind: 'pipeline', title: 'pipeline', lines: [l.pipeline.id.slice(0, 20), `${l.pipeline.stage}${l.pipeline.outcome ? ` · ${l.pipeline.outcome}` : ''}`], href: `/pipelines/${encodeURIComponent(l.pipeline.id)}/approval` }, [last]);
  // The jobs hang off the pipeline (or the dataset); the run off the job that ran it, else off what came before.
  const jobIds = l.jobs.map((j) => add({ id: `job:${j.id}`, kind: 'job', title: `${j.type} job`, lines: [j.name.slice(0, 22), j.status], href: `/jobs/${encodeURIComponent(j.id)}` }, [last]));
  if (l.run) {
    const ranIt = l.jobs.filter((j) => j.run_id === l.run!.id).map((j) => `job:${j.id}`);
    last = add(
      { id: `run:${l.run.id}`, kind: 'run', title: `run ${l.run.name}`.slice(0, 20), lines: [l.run.id.slice(0, 22), l.run.status], href: l.run.mlflow_path },
      ranIt.length ? ranIt.slice(0, 1) : jobIds.length ? [jobIds.at(-1)!] : [last],
    );
  } else if (jobIds.length) last = jobIds.at(-1)!;
  const run = last;
  for (const c of l.checkpoints)
    last = add({ id: `checkpoint:${c.path}`, kind: 'checkpoint', title: `checkpoint step ${c.step ?? '?'}`, lines: [`sha256 ${hash(c.sha256)}`, `${bytes(c.size_bytes)}${c.kind === 'best_checkpoint' ? ' · best' : ''}`], href: null }, [run]);
  // The formats are made from the final weights: the newest checkpoint's, when the run recorded checkpoints.
  const made = last;
  const formats = l.formats.map((f) =>
    add(
      { id: `format:${f.name}`, kind: 'format', title: f.name, lines: [hash(f.checksum, 16), `${bytes(f.size_bytes)} · ${f.files} files`], href: `/v1/models/${encodeURIComponent(l.name)}/versions/${l.version}/artifacts/${encodeURIComponent(f.name)}/manifest.json` },
      [made],
    ),
  );
  let prev: string | null = null;
  l.stages.forEach((s, i) => {
    prev = add({ id: `stage:${i}`, kind: 'stage', title: s.stage, lines: [`by ${s.actor}`.slice(0, 22), day(s.at)], href: null }, i === 0 ? (formats.length ? formats.slice(0, 1) : [made]) : [prev]);
  });
  return { nodes, edges };
}

/**
 * Columns by kind (empty kinds take no column), nodes stacked in each and the columns centred on the tallest;
 * edges as horizontal S-curves from a node's right side to the next one's left (down a column: a straight line).
 */
export function layoutGraph(nodes: readonly GraphNode[], edges: readonly GraphEdge[]): Layout {
  const columns = NODE_KINDS.map((k) => nodes.filter((n) => n.kind === k)).filter((c) => c.length > 0);
  const tallest = Math.max(1, ...columns.map((c) => c.length));
  const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * ROW_GAP;
  const placed = new Map<string, PlacedNode>();
  columns.forEach((col, ci) => {
    const colHeight = col.length * NODE_H + (col.length - 1) * ROW_GAP;
    const top = (height - colHeight) / 2;
    col.forEach((n, ri) => placed.set(n.id, { ...n, x: PAD + ci * (NODE_W + COL_GAP), y: top + ri * (NODE_H + ROW_GAP) }));
  });
  const width = PAD * 2 + columns.length * NODE_W + Math.max(0, columns.length - 1) * COL_GAP;
  const drawn = edges.flatMap((e) => {
    const a = placed.get(e.from);
    const b = placed.get(e.to);
    if (!a || !b) return [];
    if (a.x === b.x) return [{ ...e, d: `M${a.x + NODE_W / 2},${a.y + NODE_H} L${b.x + NODE_W / 2},${b.y}` }];
    const [x1, y1, x2, y2] = [a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2];
    const mid = (x1 + x2) / 2;
    return [{ ...e, d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}` }];
  });
  return { nodes: [...placed.values()], edges: drawn, width, height };
}
