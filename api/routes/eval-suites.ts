// /v1/eval-suites: an organization's own eval suites, immutable per (organization, name, version), beside the
// bundled ones (recipes/eval/) that every organization reads. A pipeline names either as name@version and finds
// its organization's own first. Registration checks the suite as a pipeline would load it: every field, and every
// dataset version it names must be the organization's.
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { ApiDeps, AppEnv } from '../deps.js';
import type { EvalSuite, EvalSuiteView } from '../../contracts/eval-suite.js';
import { EvalSuiteError, bundledSuiteExists, bundledSuiteRefs, checkSuiteDefinition, loadEvalSuite, parseSuiteRef } from '../../lib/eval-suites.js';
import { EvalSuiteExistsError, findEvalSuite, insertEvalSuite, listEvalSuites, type EvalSuiteRow } from '../../db/repo/eval-suites.js';
import { suiteData } from '../../datasets/eval-suites.js';
import { ApiError, invalid, notFound } from '../errors.js';
import { queryParams } from '../validate.js';
import { requireRole } from '../auth.js';
import { auditRow } from '../audit.js';

const ListQuerySchema = z.strictObject({ name: z.string().optional() });

const ownView = (row: EvalSuiteRow): EvalSuiteView => ({
  suite: `${row.name}@${row.version}`,
  name: row.name,
  version: row.version,
  source: 'organization',
  created_at: row.createdAt.toISOString(),
  created_by: row.createdBy,
  definition: row.definition,
});

const bundledView = (s: EvalSuite): EvalSuiteView => ({ suite: `${s.name}@${s.version}`, name: s.name, version: s.version, source: 'bundled', created_at: null, created_by: null, definition: s });

/** The request body as a suite definition: JSON, or YAML (the bundled suites' format) by its content type. */
async function definitionOf(req: Request): Promise<unknown> {
  const text = await req.text();
  if (!text.trim()) throw invalid('request body is empty: send the suite as JSON or YAML (content-type application/yaml)');
  const yaml = /yaml/.test(req.headers.get('content-type') ?? '');
  try {
    return yaml ? parseYaml(text) : JSON.parse(text);
  } catch (err) {
    throw invalid(`request body is not valid ${yaml ? 'YAML' : 'JSON'}: ${(err as Error).message.split('\n')[0]}`);
  }
}

export function evalSuiteRoutes(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  app.post('/', async (c) => {
    const principal = requireRole(c, 'developer');
    const raw = await definitionOf(c.req.raw);
    let suite: EvalSuite;
    try {
      suite = checkSuiteDefinition(raw, 'invalid eval suite');
      // Checked as a pipeline would load it: a held-out set the organization cannot use is refused now, not mid-run.
      await suiteData(deps.db, principal.organizationId, suite);
    } catch (err) {
      if (err instanceof EvalSuiteError) throw invalid(err.message);
      throw err;
    }
    if (await bundledSuiteExists(suite.name, suite.version)) throw new ApiError('INVALID_STATE', `eval suite ${suite.name}@${suite.version} is bundled with the product: register another name or version`);
    try {
      const row = await insertEvalSuite(
        deps.db,
        { id: randomUUID(), organizationId: principal.organizationId, name: suite.name, version: suite.version, definition: suite, createdBy: principal.subject },
        (tx, r) => auditRow(c, 'eval_suite.create', r.id)(tx, { suite: `${r.name}@${r.version}` }),
      );
      return c.json(ownView(row), 201);
    } catch (err) {
      if (err instanceof EvalSuiteExistsError) throw new ApiError('INVALID_STATE', err.message);
      throw err;
    }
  });

  app.get('/', async (c) => {
    const principal = requireRole(c, 'viewer');
    const q = queryParams(c, ListQuerySchema);
    const own = (await listEvalSuites(deps.db, principal.organizationId, q.name)).map(ownView);
    const bundled = await Promise.all((await bundledSuiteRefs()).filter((r) => !q.name || r.startsWith(`${q.name}@`)).map(loadEvalSuite));
    return c.json({ eval_suites: [...own, ...bundled.map(bundledView)] });
  });

  app.get('/:name/:version', async (c) => {
    const principal = requireRole(c, 'viewer');
    const ref = `${c.req.param('name')}@${c.req.param('version')}`;
    let parts: { name: string; version: number };
    try {
      parts = parseSuiteRef(ref);
    } catch (err) {
      throw invalid((err as Error).message);
    }
    const own = await findEvalSuite(deps.db, principal.organizationId, parts.name, parts.version);
    if (own) return c.json(ownView(own));
    if (await bundledSuiteExists(parts.name, parts.version)) return c.json(bundledView(await loadEvalSuite(ref)));
    throw notFound(`eval suite ${ref}`);
  });

  return app;
}
