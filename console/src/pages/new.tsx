// New fine-tune, no code: a dataset (uploaded or chosen), a base model and a recipe (LoRA by default; the other
// methods and every setting with its default under "Advanced", drawn from the API's schema of POST /v1/pipelines),
// the memory estimate on a chosen GPU and the dry run's cost, both refreshed as the recipe changes, then Start.
import { useEffect, useMemo, useState } from 'preact/hooks';
import type { MemoryEstimate } from '../../../contracts/console.js';
import type { PipelineDryRun } from '../../../contracts/cost.js';
import type { Dataset } from '../../../contracts/datasets.js';
import { api, ApiFailure } from '../api.js';
import { DatasetStep } from '../dataset-step.js';
import { num, usd } from '../format.js';
import { navigate } from '../router.js';
import { SchemaSection } from '../schema-form.js';
import { fieldErrors, sectionValue, type Edits, type JsonSchema } from '../schema-values.js';

/** The request sections under "Advanced", in the order a person tunes them; some only for their methods. */
const ADVANCED: { name: string; title: string; methods?: string[]; skip?: string[] }[] = [
  { name: 'hyperparameters', title: 'Hyperparameters' },
  { name: 'quantization', title: 'QLoRA: 4-bit base', methods: ['qlora'] },
  { name: 'adalora', title: 'AdaLoRA: rank budget', methods: ['adalora'] },
  { name: 'preference', title: 'Preference loss', methods: ['dpo', 'orpo'] },
  { name: 'data', title: 'Data', skip: ['tokenized_dir'] },
  { name: 'checkpoint', title: 'Checkpoints' },
  { name: 'recovery', title: 'Recovery' },
  { name: 'hardware', title: 'Hardware' },
  { name: 'eval', title: 'Evaluation' },
  { name: 'validate', title: 'Validation' },
  { name: 'promotion', title: 'Promotion' },
];
const ESTIMATE_DEBOUNCE_MS = 600;
const TRAINING_JOB_WAIT_MS = 20_000;

interface Schemas {
  pipeline: JsonSchema;
  gpus: string[];
}

/** The request schemas of POST /v1/pipelines and POST /v1/estimates/memory, from the API's OpenAPI document. */
async function loadSchemas(): Promise<Schemas> {
  const res = await fetch('/openapi.json', { credentials: 'same-origin' });
  if (!res.ok) throw new Error(`GET /openapi.json: HTTP ${res.status}`);
  const doc = (await res.json()) as { paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: JsonSchema }> } }>> };
  const body = (path: string) => doc.paths[path]?.post?.requestBody?.content['application/json']?.schema;
  const pipeline = body('/v1/pipelines');
  const memory = body('/v1/estimates/memory');
  if (!pipeline || !memory) throw new Error('the API document lacks the request schemas of POST /v1/pipelines and /v1/estimates/memory');
  return { pipeline, gpus: (memory.properties?.gpu?.properties?.name?.enum ?? []).map(String) };
}

interface Form {
  modelName: string;
  baseModel: string;
  method: string;
  gpu: string;
  edits: Edits;
}

/** The POST /v1/pipelines body less its dataset: what the form names, each advanced section only with what was edited. */
function recipeOf(form: Form, schema: JsonSchema): Record<string, unknown> {
  const req: Record<string, unknown> = { model_name: form.modelName, base_model: form.baseModel, method: form.method };
  for (const s of ADVANCED) {
    const section = schema.properties?.[s.name];
    if (!section || (s.methods && !s.methods.includes(form.method))) continue;
    const value = sectionValue(s.name, section, form.edits);
    if (value) req[s.name] = value;
  }
  return req;
}

/** The POST /v1/estimates/memory body for the same recipe on the chosen GPU. */
function memoryRequest(form: Form, req: Record<string, unknown>): Record<string, unknown> {
  const hw = (req.hardware ?? {}) as { processes?: number; nodes?: number; strategy?: string; precision?: string };
  const quantization = req.quantization as { double_quant?: boolean } | undefined;
  return {
    base_model: form.baseModel,
    method: form.method,
    hyperparameters: req.hyperparameters,
    gpu: { name: form.gpu, ...(hw.processes ? { count: hw.processes } : {}), ...(hw.nodes ? { nodes: hw.nodes } : {}), ...(hw.strategy ? { strategy: hw.strategy } : {}), ...(hw.precision ? { precision: hw.precision } : {}) },
    ...(form.method === 'qlora' ? { quantization: quantization?.double_quant === undefined ? {} : { double_quant: quantization.double_quant } } : {}),
    data: { packing: (req.data as { packing?: boolean } | undefined)?.packing ?? false },
  };
}

type Estimate<T> = { value: T } | { error: string } | null;

export function NewFineTunePage() {
  const [schemas, setSchemas] = useState<Schemas | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [dataset, setDataset] = useState<Dataset | null>(null);
  const [form, setForm] = useState<Form>({ modelName: '', baseModel: '', method: '', gpu: '', edits: {} });
  const [baseModelTouched, setBaseModelTouched] = useState(false);
  const [errors, setErrors] = useState<{ field: string | null; message: string }[]>([]);
  const [starting, setStarting] = useState<string | null>(null);

  useEffect(() => {
    loadSchemas()
      .then((s) => {
        setSchemas(s);
        setForm((f) => ({ ...f, method: String(s.pipeline.properties?.method?.default ?? 'lora'), gpu: s.gpus[0] ?? '' }));
      })
      .catch((e: Error) => setLoadError(e.message));
  }, []);
  // The base model defaults to the one whose tokenizer counted the dataset's tokens.
  useEffect(() => {
    const tokenizer = dataset?.metadata.tokenizer;
    if (!baseModelTouched && typeof tokenizer === 'string') setForm((f) => ({ ...f, baseModel: tokenizer }));
  }, [dataset, baseModelTouched]);

  const recipe = useMemo(() => (schemas ? recipeOf(form, schemas.pipeline) : null), [form, schemas]);
  const req = useMemo(() => (recipe && dataset ? { ...recipe, dataset: { name: dataset.name, version: dataset.version } } : null), [recipe, dataset]);
  const estimates = useEstimates(form, recipe, req);

  const set = (patch: Partial<Form>) => setForm((f) => ({ ...f, ...patch }));
  const edit = (path: string, value: string | boolean | undefined) =>
    setForm((f) => {
      const edits = { ...f.edits };
      if (value === undefined) delete edits[path];
      else edits[path] = value;
      return { ...f, edits };
    });
  const byField = Object.fromEntries(errors.filter((e) => e.field).map((e) => [e.field!, e.message]));

  const start = async () => {
    if (!req) return;
    setErrors([]);
    setStarting('starting…');
    try {
      const started = await api<{ id: string }>('POST', '/v1/pipelines', req);
      setStarting(`Started pipeline ${started.id}: opening its training job…`);
      navigate(await trainingJobPage(started.id));
    } catch (err) {
      setStarting(null);
      setErrors(err instanceof ApiFailure ? fieldErrors(err.message) : [{ field: null, message: (err as Error).message }]);
    }
  };

  if (loadError) return <main><p class="error">{loadError}</p></main>;
  if (!schemas) return <main><p class="muted">loading…</p></main>;
  const methods = (schemas.pipeline.properties?.method?.enum ?? []).map(String);
  return (
    <main class="new-fine-tune">
      <h1>New fine-tune</h1>
      <section class="card">
        <h2>1. Dataset</h2>
        <DatasetStep chosen={dataset} onChoose={setDataset} />
      </section>
      <section class="card">
        <h2>2. Model and recipe</h2>
        <div class="basics">
          <label for="model-name">Model name</label>
          <input id="model-name" name="model_name" value={form.modelName} placeholder="the registered model the result becomes a version of" aria-invalid={byField.model_name ? true : undefined} onInput={(e) => set({ modelName: e.currentTarget.value })} />
          <label for="base-model">Base model</label>
          <input
            id="base-model"
            name="base_model"
            value={form.baseModel}
            placeholder="a base model of the base-models directory"
            aria-invalid={byField.base_model ? true : undefined}
            onInput={(e) => {
              setBaseModelTouched(true);
              set({ baseModel: e.currentTarget.value });
            }}
          />
          <label for="method">Method</label>
          <select id="method" name="method" value={form.method} onChange={(e) => set({ method: e.currentTarget.value })}>
            {methods.map((m) => (
              <option value={m}>{m}</option>
            ))}
          </select>
          <label for="gpu">GPU (memory estimate)</label>
          <select id="gpu" value={form.gpu} onChange={(e) => set({ gpu: e.currentTarget.value })}>
            {schemas.gpus.map((g) => (
              <option value={g}>{g}</option>
            ))}
          </select>
        </div>
        <details class="advanced">
          <summary>Advanced</summary>
          <p class="muted small">Every setting shows the API's default; only the ones you change are sent.</p>
          {ADVANCED.filter((s) => (!s.methods || s.methods.includes(form.method)) && schemas.pipeline.properties?.[s.name]).map((s) => (
            <SchemaSection name={s.name} title={s.title} schema={schemas.pipeline.properties![s.name]!} edits={form.edits} onEdit={edit} errors={byField} skip={s.skip} />
          ))}
        </details>
      </section>
      <section class="card estimates">
        <h2>3. Estimates</h2>
        <MemoryPanel estimate={estimates.memory} gpu={form.gpu} hasBaseModel={form.baseModel !== ''} />
        <CostPanel estimate={estimates.cost} hasDataset={dataset !== null} />
      </section>
      {errors.length > 0 && (
        <ul class="errors" role="alert">
          {errors.map((e) => (
            <li class="error">
              {e.field && <code>{e.field}</code>} {e.message}
            </li>
          ))}
        </ul>
      )}
      <div class="actions">
        <button type="button" class="primary" disabled={!req || starting !== null} onClick={() => void start()}>
          Start fine-tune
        </button>
        {starting && <span role="status">{starting}</span>}
      </div>
    </main>
  );
}

/** The page to open after a start: the pipeline's training job once it exists, else the jobs list. */
async function trainingJobPage(pipelineId: string): Promise<string> {
  const deadline = Date.now() + TRAINING_JOB_WAIT_MS;
  while (Date.now() < deadline) {
    const q = new URLSearchParams({ parent: `pipeline:${pipelineId}`, type: 'training', limit: '1' });
    const { jobs } = await api<{ jobs: { id: string }[] }>('GET', `/v1/jobs?${q}`);
    if (jobs[0]) return `/jobs/${encodeURIComponent(jobs[0].id)}`;
    await new Promise((r) => setTimeout(r, 1000));
  }
  return '/jobs';
}

/** Both estimates of the recipe as it stands, asked again (debounced) whenever it changes; a stale answer is dropped. */
function useEstimates(form: Form, recipe: Record<string, unknown> | null, req: Record<string, unknown> | null) {
  const [memory, setMemory] = useState<Estimate<MemoryEstimate>>(null);
  const [cost, setCost] = useState<Estimate<PipelineDryRun>>(null);
  const memoryBody = recipe && form.baseModel && form.gpu ? memoryRequest(form, recipe) : null;
  const memoryKey = JSON.stringify(memoryBody);
  const costKey = JSON.stringify(req);
  useEffect(() => {
    if (!memoryBody) return setMemory(null);
    let live = true;
    const timer = setTimeout(() => {
      api<MemoryEstimate>('POST', '/v1/estimates/memory', memoryBody).then(
        (value) => live && setMemory({ value }),
        (e: Error) => live && setMemory({ error: e.message }),
      );
    }, ESTIMATE_DEBOUNCE_MS);
    return () => ((live = false), clearTimeout(timer));
  }, [memoryKey]);
  useEffect(() => {
    if (!req) return setCost(null);
    let live = true;
    const timer = setTimeout(() => {
      api<PipelineDryRun>('POST', '/v1/pipelines?dry_run=true', req).then(
        (value) => live && setCost({ value }),
        (e: Error) => live && setCost({ error: e.message }),
      );
    }, ESTIMATE_DEBOUNCE_MS);
    return () => ((live = false), clearTimeout(timer));
  }, [costKey]);
  return { memory, cost };
}

const GIB = 2 ** 30;
const gib = (bytes: number) => `${num(bytes / GIB, 3)} GiB`;

function MemoryPanel({ estimate, gpu, hasBaseModel }: { estimate: Estimate<MemoryEstimate>; gpu: string; hasBaseModel: boolean }) {
  return (
    <div class="estimate" data-testid="memory-estimate">
      <h3>Memory on {gpu}</h3>
      {!estimate && <p class="muted">{hasBaseModel ? 'estimating…' : 'Name a base model for the memory estimate.'}</p>}
      {estimate && 'error' in estimate && <p class="error">{estimate.error}</p>}
      {estimate && 'value' in estimate && (
        <>
          <p class={estimate.value.fits ? 'verdict-pass' : 'verdict-block'}>{estimate.value.verdict}</p>
          <dl class="summary">
            <dt>per device</dt>
            <dd>
              {gib(estimate.value.total_bytes)} of {gib(estimate.value.device_memory_bytes)}
            </dd>
            {Object.entries(estimate.value.breakdown).map(([k, v]) => (
              <>
                <dt>{k}</dt>
                <dd>{gib(v)}</dd>
              </>
            ))}
            <dt>trainable params</dt>
            <dd>{estimate.value.trainable_params.toLocaleString()}</dd>
            <dt>largest micro-batch</dt>
            <dd>{estimate.value.max_micro_batch}</dd>
          </dl>
        </>
      )}
    </div>
  );
}

function CostPanel({ estimate, hasDataset }: { estimate: Estimate<PipelineDryRun>; hasDataset: boolean }) {
  return (
    <div class="estimate" data-testid="cost-estimate">
      <h3>Cost (dry run)</h3>
      {!estimate && <p class="muted">{hasDataset ? 'estimating…' : 'Choose a dataset for the cost estimate.'}</p>}
      {estimate && 'error' in estimate && <p class="error">{estimate.error}</p>}
      {estimate && 'value' in estimate && <CostFigures run={estimate.value} />}
    </div>
  );
}

function CostFigures({ run }: { run: PipelineDryRun }) {
  const e = run.estimate;
  return (
    <dl class="summary">
      <dt>tokens</dt>
      <dd>{e.tokens.toLocaleString()}</dd>
      <dt>steps</dt>
      <dd>
        {e.steps} ({num(e.epochs, 3)} epochs of {e.train_items} items)
      </dd>
      <dt>GPU-hours</dt>
      <dd>
        {num(e.gpu_hours, 3)} on {e.gpu_type}
      </dd>
      <dt>cost</dt>
      <dd data-testid="cost-usd">
        {usd(e.usd)} at {usd(e.price_per_gpu_hour_usd)}/h ({e.basis === 'measured' ? `measured over ${e.samples} jobs` : 'configured throughput'})
      </dd>
      <dt>budget</dt>
      <dd>{run.budget ? `${usd(run.budget.left_usd)} left of ${usd(run.budget.monthly_budget_usd)} this month: ${run.fits_budget ? 'fits' : 'does NOT fit'}` : 'no monthly budget set'}</dd>
    </dl>
  );
}
