// The console's build: `npx vite build --config console/vite.config.ts` (scripts/bootstrap.sh runs it into the
// cache, keyed by the hash of console/ and package-lock.json). The API serves the output at / (api/routes/console.ts).
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  // Preact's automatic JSX runtime, no plugin needed.
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: process.env.CONSOLE_OUT_DIR ?? 'dist',
    emptyOutDir: true,
    // The CSP allows no inline script: no preload polyfill injected into the page.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
  },
});
