// Lint: typed rules (no floating promises) everywhere; the Temporal workflow sandbox rule in workflows/.
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = builtinModules.filter((m) => !['assert', 'url', 'util'].includes(m));

export default tseslint.config(
  { ignores: ['node_modules/**', 'trainer/**', 'candle/**', 'bench/results/**', 'db/migrations/**', '.hanzo-ml/**'] },
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
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node built-ins, no activity/client/worker SDK.
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [...nodeBuiltins, ...nodeBuiltins.map((m) => `node:${m}`)].map((name) => ({ name, message: 'workflows may not use Node built-ins (Temporal sandbox)' })),
          patterns: [
            { group: ['@temporalio/activity', '@temporalio/client', '@temporalio/worker'], message: 'workflows import only @temporalio/workflow (and activity types)' },
            { group: ['../activities/*', '../activities/**'], allowTypeImports: true, message: 'workflows import activity TYPES only' },
            { group: ['../db/**', '../lib/**', '../api/**'], message: 'workflows do no I/O: go through an activity' },
          ],
        },
      ],
    },
  },
  {
    files: ['contracts/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['node:*'], message: 'contracts/ holds schemas only (no Node built-ins)' }] }],
    },
  },
);
