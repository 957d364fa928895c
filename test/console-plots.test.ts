// The console's pure plot and graph code, imported from console/src as the browser bundle uses it: the Pareto front
// of a multi-objective sweep (either direction, ties, incomplete trials), the best objective so far by completion,
// the axes of parallel coordinates (linear, log, categorical) and the lineage graph's nodes, edges and columns.
import { describe, expect, it } from 'vitest';
import { axisFor, axisTicks, bestSoFar, dominates, paretoFront, positionOn } from '../console/src/plot-math.js';
import { layoutGraph, lineageGraph, NODE_W } from '../console/src/graph.js';
import type { ModelLineage } from '../contracts/models.js';

describe('Pareto front', () => {
  const trials = [
    { n: 1, v: [0.5, 100] },
    { n: 2, v: [0.4, 300] }, // on the front: best loss
    { n: 3, v: [0.6, 50] }, // on the front: smallest
    { n: 4, v: [0.5, 200] }, // dominated by 1
    { n: 5, v: [0.5, 100] }, // equal to 1: both on the front
    { n: 6, v: null }, // unfinished: left out
    { n: 7, v: [Number.NaN, 10] },
  ];

  it('keeps the trials nothing dominates, sorted along the first objective', () => {
    const front = paretoFront(trials, (t) => t.v, ['minimize', 'minimize']);
    expect(front.map((t) => t.n)).toEqual([2, 1, 5, 3]);
  });

  it('follows each objective\'s direction', () => {
    const front = paretoFront(trials, (t) => t.v, ['minimize', 'maximize']);
    // Maximizing the second: 2 (best loss, largest) dominates 1, 3, 4 and 5.
    expect(front.map((t) => t.n)).toEqual([2]);
    expect(dominates([1, 5], [1, 4], ['minimize', 'maximize'])).toBe(true);
    expect(dominates([1, 4], [1, 4], ['minimize', 'maximize'])).toBe(false);
  });
});

describe('best so far', () => {
  it('steps down at each new best in the order trials finished, whatever order they were listed in', () => {
    const steps = bestSoFar(
      [
        { endedAt: '2026-01-01T00:03:00Z', value: 0.2 },
        { endedAt: '2026-01-01T00:01:00Z', value: 0.5 },
        { endedAt: '2026-01-01T00:02:00Z', value: 0.7 },
        { endedAt: '2026-01-01T00:04:00Z', value: 0.3 },
      ],
      'minimize',
    );
    expect(steps.map((s) => s.best)).toEqual([0.5, 0.5, 0.2, 0.2]);
    expect(bestSoFar([{ endedAt: 'a', value: 1 }, { endedAt: 'b', value: 3 }], 'maximize').map((s) => s.best)).toEqual([1, 3]);
  });
});

describe('parallel-coordinates axes', () => {
  it('maps numbers linearly from the smallest (0) to the largest (1)', () => {
    const axis = axisFor([2, 4, 10]);
    expect(axis).toEqual({ kind: 'linear', min: 2, max: 10 });
    expect(positionOn(axis, 4)).toBe(0.25);
    expect(positionOn(axis, null)).toBeNull();
  });

  it('spaces a log axis by orders of magnitude, and falls back to linear when a value is not positive', () => {
    const axis = axisFor([1e-4, 1e-3, 1e-2], { log: true });
    expect(axis.kind).toBe('log');
    expect(positionOn(axis, 1e-3)).toBeCloseTo(0.5);
    expect(axisTicks(axis).map((t) => t.label)).toEqual(['1.0e-4', '1.0e-3', '0.01']);
    expect(axisFor([0, 1], { log: true }).kind).toBe('linear');
  });

  it('makes strings and booleans a categorical axis in first-seen order', () => {
    const axis = axisFor(['q_proj', 'v_proj', 'q_proj', true]);
    expect(axis).toEqual({ kind: 'category', values: ['q_proj', 'v_proj', 'true'] });
    expect(positionOn(axis, 'v_proj')).toBe(0.5);
    expect(positionOn(axis, true)).toBe(1);
    expect(positionOn(axis, 'k_proj')).toBeNull();
  });

  it('labels a count axis with whole numbers, each where it belongs', () => {
    const ticks = axisTicks(axisFor([1, 8]), { integer: true });
    expect(ticks.map((t) => t.label)).toEqual(['1', '5', '8']);
    expect(ticks[1]!.at).toBeCloseTo(4 / 7);
  });

  it('puts a single value mid-axis', () => {
    expect(positionOn(axisFor([3]), 3)).toBe(0.5);
    expect(positionOn(axisFor(['lora']), 'lora')).toBe(0.5);
  });
});

describe('lineage graph', () => {
  const sha = (c: string) => c.repeat(64);
  const lineage: ModelLineage = {
    name: 'm',
    version: 2,
    stage: 'production',
    dataset: { id: 'd2', name: 'ds', version: 2, sha256: sha('b'), num_records: 10, created_at: '', parents: [{ id: 'd1', name: 'ds-raw', version: 1, sha256: sha('a'), num_records: 12, created_at: '' }] },
    pipeline: { id: 'p1', stage: 'completed', outcome: 'promoted', created_at: '' },
    jobs: [
      { id: 'j1', name: 'train', type: 'training', status: 'succeeded', run_id: 'r1' },
      { id: 'j2', name: 'eval', type: 'eval', status: 'succeeded', run_id: null },
    ],
    run: { id: 'r1', name: 'run', status: 'completed', experiment_id: '3', mlflow_path: '/mlflow/#/experiments/3/runs/r1' },
    checkpoints: [
      { path: 'checkpoints/15', step: 15, kind: 'checkpoint', sha256: sha('c'), size_bytes: 10 },
      { path: 'checkpoints/30', step: 30, kind: 'checkpoint', sha256: sha('d'), size_bytes: 10 },
    ],
    formats: [
      { name: 'safetensors', checksum: `sha256:${sha('e')}`, size_bytes: 2048, files: 3 },
      { name: 'gguf-q8_0', checksum: `sha256:${sha('f')}`, size_bytes: 1024, files: 1 },
    ],
    stages: [
      { stage: 'staging', from: null, actor: 'dev', at: '2026-01-01T00:00:00Z', reason: 'registered' },
      { stage: 'production', from: 'staging', actor: 'ann', at: '2026-01-01T01:00:00Z', reason: 'ok' },
    ],
  };

  it('links dataset parent -> dataset -> pipeline -> jobs, the run to the job that ran it, and the newest checkpoint to the formats', () => {
    const { nodes, edges } = lineageGraph(lineage);
    const e = edges.map((x) => `${x.from} > ${x.to}`);
    expect(e).toEqual(
      expect.arrayContaining([
        'dataset:d1 > dataset:d2',
        'dataset:d2 > pipeline:p1',
        'pipeline:p1 > job:j1',
        'pipeline:p1 > job:j2',
        'job:j1 > run:r1',
        'run:r1 > checkpoint:checkpoints/15',
        'run:r1 > checkpoint:checkpoints/30',
        'checkpoint:checkpoints/30 > format:gguf-q8_0',
        'format:safetensors > stage:0',
        'stage:0 > stage:1',
      ]),
    );
    expect(nodes.find((n) => n.id === 'dataset:d2')!.lines[0]).toBe(`sha256 ${'b'.repeat(12)}…`);
    expect(nodes.find((n) => n.id === 'format:gguf-q8_0')!.lines[0]).toBe(`${'f'.repeat(16)}…`);
    expect(nodes.find((n) => n.id === 'job:j1')!.href).toBe('/jobs/j1');
    expect(nodes.find((n) => n.id === 'run:r1')!.href).toBe('/mlflow/#/experiments/3/runs/r1');
    expect(nodes.find((n) => n.id === 'stage:1')!.lines[0]).toBe('by ann');
  });

  it('lays out one column per kind present, left to right in chain order, every edge between placed nodes', () => {
    const { nodes, edges } = lineageGraph(lineage);
    const layout = layoutGraph(nodes, edges);
    const x = (id: string) => layout.nodes.find((n) => n.id === id)!.x;
    const order = ['dataset:d1', 'dataset:d2', 'pipeline:p1', 'job:j1', 'run:r1', 'checkpoint:checkpoints/15', 'format:safetensors', 'stage:0'].map(x);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(order.length);
    expect(layout.width).toBeGreaterThanOrEqual(8 * NODE_W);
    expect(layout.edges).toHaveLength(edges.length);
    // Nodes of one column do not overlap.
    const col = layout.nodes.filter((n) => n.kind === 'checkpoint').map((n) => n.y);
    expect(Math.abs(col[1]! - col[0]!)).toBeGreaterThan(0);
  });

  it('draws a version registered by hand from a run: no dataset or pipeline, the run first', () => {
    const { nodes, edges } = lineageGraph({ ...lineage, dataset: null, pipeline: null, jobs: [], checkpoints: [] });
    expect(nodes.map((n) => n.kind)).toEqual(['run', 'format', 'format', 'stage', 'stage']);
    expect(edges.map((x) => `${x.from} > ${x.to}`)).toContain('run:r1 > format:safetensors');
  });
});
