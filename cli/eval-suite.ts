// `hanzo-ml eval-suite create|list|show`: the organization's own eval suites (/v1/eval-suites) beside the bundled ones.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import type { Command } from 'commander';
import { ApiClientError } from './api-client.js';
import type { JobCliIo } from './job.js';
import type { EvalSuiteView } from '../contracts/eval-suite.js';

export function registerEvalSuiteCommands(program: Command, io: JobCliIo): void {
  const suites = program.command('eval-suite').description("eval suites: the organization's own (immutable per name and version) and the bundled ones");
  suites
    .command('create <file>')
    .description('register a suite from a YAML or JSON file (contracts/eval-suite.ts); its held-out sets may name dataset versions')
    .action(async (file: string) => {
      const path = resolve(file);
      if (!existsSync(path) || !statSync(path).isFile()) throw new ApiClientError(0, 'INVALID_PARAMETER_VALUE', `${file}: no such file`);
      const type = extname(path).toLowerCase() === '.json' ? 'application/json' : 'application/yaml';
      io.print(await io.api().post('/v1/eval-suites', undefined, { raw: readFileSync(path, 'utf8'), headers: { 'content-type': type } }));
    });
  suites
    .command('list')
    .option('--name <name>')
    .action(async (o: { name?: string }) => {
      const { eval_suites } = await io.api().get<{ eval_suites: EvalSuiteView[] }>(`/v1/eval-suites${o.name ? `?name=${encodeURIComponent(o.name)}` : ''}`);
      io.table(eval_suites.map((s) => ({ suite: s.suite, source: s.source, metrics: (s.definition.metrics as unknown[]).length, created_by: s.created_by ?? '', created_at: s.created_at ?? '' })));
    });
  suites
    .command('show <suite>')
    .description('a suite as name@version: the organization\'s own first, else the bundled one')
    .action(async (ref: string) => {
      const at = ref.lastIndexOf('@');
      if (at <= 0) throw new ApiClientError(0, 'INVALID_PARAMETER_VALUE', `${ref}: expected name@version, e.g. support-desk@3`);
      io.print(await io.api().get(`/v1/eval-suites/${encodeURIComponent(ref.slice(0, at))}/${encodeURIComponent(ref.slice(at + 1))}`));
    });
}
