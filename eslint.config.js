// Lint: typed rules (no floating promises) everywhere; the Temporal workflow sandbox rule in workflows/.
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = builtinModules.filter((m) => !['assert', 'url', 'util'].includes(m));

export default tseslint.config(
  { ignores: ['console/dist/**', 'node_modules/**', 'trainer/**', 'candle/**', 'bench/results/**', 'db/migrations/**', '.hanzo-ml/**'] },
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: { allowDefaultProject: ['eslint.config.js'] }, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  ...layerRules(),
  consoleRule(),
);

/**
 * The web console is a browser app: it reads the API over HTTP and shares only the contracts' TYPES (erased in
 * its build), never server code. Its build config alone runs in Node.
 */
function consoleRule() {
  const server = ['lib', 'db', 'datasets', 'events', 'jobs', 'activities', 'workflows', 'workers', 'api', 'runtime', 'cli'];
  return {
    files: ['console/**/*.ts', 'console/**/*.tsx'],
    ignores: ['console/vite.config.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: server.map((d) => `**/${d}/**`), message: 'the console imports no server code: it calls the API' },
            { group: ['**/contracts/**'], allowTypeImports: true, message: 'the console imports contracts TYPES only (import type)' },
            { group: ['node:*'], message: 'the console runs in a browser' },
          ],
        },
      ],
    },
  };
}

/**
 * Imports run one way (STYLE.md): a layer imports only from the layers before it. Rule options do not merge
 * across config objects, so each directory's one no-restricted-imports entry holds its layer patterns and its own
 * (the workflow sandbox, the schema-only contracts). structure.test.ts checks the same order at any depth.
 */
function layerRules() {
  const layers = [['contracts'], ['lib'], ['db'], ['datasets', 'events', 'jobs'], ['activities'], ['workflows', 'workers'], ['api'], ['runtime'], ['cli']];
  const own = {
    // Workflow code runs in Temporal's deterministic sandbox: no Node built-ins, no activity/client/worker SDK.
    workflows: (up) => ({
      paths: [...nodeBuiltins, ...nodeBuiltins.map((m) => `node:${m}`)].map((name) => ({ name, message: 'workflows may not use Node built-ins (Temporal sandbox)' })),
      patterns: [
        { group: ['@temporalio/activity', '@temporalio/client', '@temporalio/worker'], message: 'workflows import only @temporalio/workflow (and activity types)' },
        { group: [`${up}activities/*`, `${up}activities/**`], allowTypeImports: true, message: 'workflows import activity TYPES only' },
        { group: [`${up}db/**`, `${up}lib/**`, `${up}api/**`], message: 'workflows do no I/O: go through an activity' },
      ],
    }),
    contracts: () => ({ paths: [], patterns: [{ group: ['node:*'], message: 'contracts/ holds schemas only (no Node built-ins)' }] }),
    // The jobs wing runs jobs for whatever drives it: the activity supplies heartbeats and cancellation (jobs/activity.ts).
    jobs: () => ({ paths: [], patterns: [{ group: ['@temporalio/activity', '@temporalio/workflow', '@temporalio/client', '@temporalio/worker'], message: 'jobs/ takes heartbeats and cancellation from a JobActivity, not from Temporal (jobs/activity.ts)' }] }),
  };
  return layers.flatMap((dirs, i) => {
    const later = layers.slice(i + 1).flat();
    return dirs.flatMap((dir) =>
      [1, 2, 3].map((depth) => {
        const up = '../'.repeat(depth);
        const base = own[dir]?.(up) ?? { paths: [], patterns: [] };
        const layer = later.length ? [{ group: later.map((d) => `${up}${d}/**`), message: `${dir}/ may import only from earlier layers (${layers.slice(0, i).flat().join(', ') || 'none'}): see STYLE.md` }] : [];
        return { files: [`${dir}/${'*/'.repeat(depth - 1)}*.ts`], rules: { 'no-restricted-imports': ['error', { paths: base.paths, patterns: [...base.patterns, ...layer] }] } };
      }),
    );
  });
}
