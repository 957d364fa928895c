import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // The Temporal core bridge is native: worker threads crash with it, forked processes do not.
    pool: 'forks',
    include: ['test/**/*.test.ts'],
    setupFiles: ['test/support/setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    fileParallelism: false,
  },
});
