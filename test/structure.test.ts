// The layering the code relies on (STYLE.md): contracts < lib < db < domain wings (datasets, events, jobs) <
// activities < workflows/workers < api < runtime < cli. A file imports only from its own layer or earlier ones, so the store never reaches for
// the API and activities never for workflows. Lint (eslint.config.js) says the same per file; this test reads
// every import at any depth, type imports included, and names each one that points the wrong way.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const LAYERS: string[][] = [['contracts'], ['lib'], ['db'], ['datasets', 'events', 'jobs'], ['activities'], ['workflows', 'workers'], ['api'], ['runtime'], ['cli']];
const layerOf = (path: string): number => LAYERS.findIndex((dirs) => dirs.includes(path.split('/')[0]!));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}
const importsOf = (file: string): string[] => [...readFileSync(file, 'utf8').matchAll(/^(?:import|export)[^;]*?from '([^']+)'/gms)].map((m) => m[1]!);

/** `from -> to` for every relative import of a layered file that points to a later layer. */
function upwardImports(): string[] {
  return LAYERS.flat().flatMap((dir) =>
    sources(dir).flatMap((file) =>
      importsOf(file)
        .filter((spec) => spec.startsWith('.'))
        .map((spec) => normalize(join(dirname(file), spec)))
        .filter((target) => layerOf(target) > layerOf(file))
        .map((target) => `${file} -> ${target}`),
    ),
  );
}

/** The jobs wing imports only contracts/, lib/, db/ and itself, and no Temporal SDK but its common types. */
const JOBS_MAY_IMPORT = ['contracts', 'lib', 'db', 'jobs'];
const TEMPORAL_RUNTIME = /^@temporalio\/(activity|workflow|client|worker)$/;
function jobsWingViolations(file: string, specs: string[]): string[] {
  return specs
    .filter((spec) => (spec.startsWith('.') ? !JOBS_MAY_IMPORT.includes(normalize(join(dirname(file), spec)).split('/')[0]!) : TEMPORAL_RUNTIME.test(spec)))
    .map((spec) => `${file} -> ${spec}`);
}

describe('layering', () => {
  it('has no import from an earlier layer to a later one', () => {
    expect(upwardImports()).toEqual([]);
  });

  it('reads real imports, so an upward one would be caught', () => {
    // The store imports its schema (same layer) and the object store imports nothing layered above lib.
    expect(importsOf('db/repo/metrics.ts')).toContain('../schema/index.js');
    expect(layerOf('api/app.ts')).toBeGreaterThan(layerOf('db/client.ts'));
    expect(layerOf('runtime/serve.ts')).toBeGreaterThan(layerOf('api/app.ts'));
  });

  it('keeps the jobs wing to contracts, lib and db, with no Temporal activity or workflow API', () => {
    expect(sources('jobs').flatMap((file) => jobsWingViolations(file, importsOf(file)))).toEqual([]);
    // The check reads the wing's real imports and names one that reaches for an activity, a workflow or the API.
    expect(importsOf('jobs/run-loop.ts')).toContain('./queue/admission.js');
    expect(jobsWingViolations('jobs/run-loop.ts', ['../activities/deps.js', '../workflows/jobs.js', '../api/app.js', '@temporalio/activity', '../db/client.js', '@temporalio/common'])).toEqual([
      'jobs/run-loop.ts -> ../activities/deps.js',
      'jobs/run-loop.ts -> ../workflows/jobs.js',
      'jobs/run-loop.ts -> ../api/app.js',
      'jobs/run-loop.ts -> @temporalio/activity',
    ]);
  });

  it('keeps the browser console to the API and the contracts\' types, with no server code', () => {
    const files = readdirSync('console/src', { recursive: true, encoding: 'utf8' }).filter((f) => /\.tsx?$/.test(f)).map((f) => join('console/src', f));
    const outside = files.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/^import (type )?[^;]*?from '([^']+)'/gms)]
        .filter((m) => m[2]!.startsWith('.') && !normalize(join(dirname(file), m[2]!)).startsWith('console/'))
        .filter((m) => !(m[1] && normalize(join(dirname(file), m[2]!)).startsWith('contracts/')))
        .map((m) => `${file} -> ${m[2]}`),
    );
    expect(outside).toEqual([]);
    // It does read the contracts' types, so the check above sees real imports.
    expect(readFileSync('console/src/pages/jobs.tsx', 'utf8')).toMatch(/^import type \{[^}]*JobView[^}]*\} from '\.\.\/\.\.\/\.\.\/contracts\/jobs\.js'/m);
  });

  it('gives each process shape its own entry point, and the worker shape builds no API', () => {
    const worker = importsOf('runtime/worker.ts');
    expect(worker.some((i) => /api\/app/.test(i))).toBe(false);
    expect(readFileSync('runtime/worker.ts', 'utf8')).not.toMatch(/buildApp|createApp|listen\(/);
    expect(readFileSync('runtime/serve.ts', 'utf8')).not.toMatch(/startWorkerPart|createPipelineWorker|createExecutor/);
    const lib = sources('lib').flatMap((f) => importsOf(f).filter((i) => i.startsWith('.') && !i.startsWith('./') && !i.includes('/contracts/')).map((i) => `${f} -> ${i}`));
    expect(lib).toEqual([]);
  });
});
