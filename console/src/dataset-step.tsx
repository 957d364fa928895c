// The dataset of a new fine-tune: upload a file (streamed by the browser, the API's refusal shown issue by issue:
// file, line or record, field, what was expected) or choose an existing version; then the chosen version's record
// and token counts and a preview of its splits.
import { useEffect, useState } from 'preact/hooks';
import type { Dataset, DatasetIssue, SplitName, UploadFormat } from '../../contracts/datasets.js';
import { api, uploadFile, UploadRefused } from './api.js';
import { num } from './format.js';

const FORMATS: Record<string, UploadFormat> = { jsonl: 'jsonl', json: 'jsonl', csv: 'csv', parquet: 'parquet', arrow: 'arrow', feather: 'arrow', txt: 'text' };
const SPLIT_NAMES: SplitName[] = ['train', 'validation', 'test'];
const PREVIEW_RECORDS = 5;
const PREPARING_POLL_MS = 2000;

/** The upload's format from the file name (a .gz or .zst suffix is the compression, the API reads it). */
export function formatOf(filename: string): UploadFormat | null {
  const ext = /\.([a-z]+)(?:\.(?:gz|zst))?$/i.exec(filename)?.[1]?.toLowerCase();
  return ext ? (FORMATS[ext] ?? null) : null;
}

/** A dataset name from a file name: the API's rule (letters, digits, ".", "_", "-", starting with one of the first two). */
export function nameOf(filename: string): string {
  const stem = filename.replace(/(\.(gz|zst))?$/i, '').replace(/\.[^.]+$/, '');
  return stem.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 128) || 'dataset';
}

export function DatasetStep({ chosen, onChoose }: { chosen: Dataset | null; onChoose: (d: Dataset | null) => void }) {
  const [versions, setVersions] = useState<Dataset[]>([]);
  const refresh = () =>
    api<{ datasets: Dataset[] }>('GET', '/v1/datasets?limit=100')
      .then((r) => setVersions(r.datasets))
      .catch(() => setVersions([]));
  useEffect(() => {
    void refresh();
  }, []);

  return (
    <>
      <UploadForm
        onUploaded={(d) => {
          onChoose(d);
          void refresh();
        }}
      />
      <p>
        <label for="dataset-version">or an existing version: </label>
        <select
          id="dataset-version"
          value={chosen?.id ?? ''}
          onChange={(e) => {
            const id = e.currentTarget.value;
            onChoose(versions.find((v) => v.id === id) ?? null);
          }}
        >
          <option value="">—</option>
          {versions
            .filter((v) => v.status === 'ready')
            .map((v) => (
              <option value={v.id}>
                {v.name} v{v.version} · {v.num_records} records
              </option>
            ))}
        </select>
      </p>
      {chosen && <VersionSummary dataset={chosen} />}
    </>
  );
}

function UploadForm({ onUploaded }: { onUploaded: (d: Dataset) => void }) {
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState('');
  const [format, setFormat] = useState<UploadFormat>('jsonl');
  const [busy, setBusy] = useState<string | null>(null);
  const [refusal, setRefusal] = useState<{ message: string; issues: DatasetIssue[] } | null>(null);

  const upload = async (e: Event) => {
    e.preventDefault();
    if (!file) return;
    setRefusal(null);
    setBusy(`uploading ${file.name} (${num(file.size / 2 ** 20, 3)} MiB), checking and counting tokens…`);
    try {
      const q = new URLSearchParams({ name, format });
      let d = await uploadFile<Dataset>(`/v1/datasets?${q}`, file);
      // A file the trainer prepares may answer before it is ready: follow it until it is.
      while (d.status === 'preparing') {
        setBusy(`preparing ${d.name} v${d.version}…`);
        await new Promise((r) => setTimeout(r, PREPARING_POLL_MS));
        d = await api<Dataset>('GET', `/v1/datasets/${encodeURIComponent(d.id)}`);
      }
      if (d.status === 'failed') setRefusal({ message: `${d.name} v${d.version} failed preparation`, issues: d.issues ?? [] });
      else onUploaded(d);
    } catch (err) {
      setRefusal({ message: (err as Error).message, issues: err instanceof UploadRefused ? err.issues : [] });
    } finally {
      setBusy(null);
    }
  };

  return (
    <form class="upload" onSubmit={(e) => void upload(e)}>
      <label for="dataset-file">Upload a file</label>
      <input
        id="dataset-file"
        type="file"
        accept=".jsonl,.json,.csv,.parquet,.arrow,.feather,.txt,.gz,.zst"
        onChange={(e) => {
          const f = e.currentTarget.files?.[0] ?? null;
          setFile(f);
          setRefusal(null);
          if (f) {
            setName(nameOf(f.name));
            setFormat(formatOf(f.name) ?? 'jsonl');
          }
        }}
      />
      <label for="dataset-name">name</label>
      <input id="dataset-name" value={name} onInput={(e) => setName(e.currentTarget.value)} />
      <label for="dataset-format">format</label>
      <select id="dataset-format" value={format} onChange={(e) => setFormat(e.currentTarget.value as UploadFormat)}>
        {[...new Set(Object.values(FORMATS))].map((f) => (
          <option value={f}>{f}</option>
        ))}
      </select>
      <button type="submit" disabled={!file || !name || busy !== null}>
        Upload
      </button>
      {busy && (
        <span class="muted" role="status">
          {busy}
        </span>
      )}
      {refusal && <Issues {...refusal} />}
    </form>
  );
}

/** The API's refusal: its message, then one row per problem, by file, line or record, field and expectation. */
export function Issues({ message, issues }: { message: string; issues: DatasetIssue[] }) {
  return (
    <div class="issues" role="alert">
      <p class="error">{issues.length ? `The file was refused: ${issues.length} problem${issues.length === 1 ? '' : 's'}.` : message}</p>
      {issues.length > 0 && (
        <table class="issues">
          <thead>
            <tr>
              <th>File</th>
              <th>Line / record</th>
              <th>Field</th>
              <th>Expected</th>
              <th>Problem</th>
            </tr>
          </thead>
          <tbody>
            {issues.map((i) => (
              <tr data-line={i.line ?? i.record ?? ''}>
                <td>{i.file}</td>
                <td>{i.line ? `line ${i.line}` : i.record ? `record ${i.record}` : 'whole file'}</td>
                <td>{i.field ? <code>{i.field}</code> : '—'}</td>
                <td>{i.expected ?? '—'}</td>
                <td>{i.message}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function VersionSummary({ dataset }: { dataset: Dataset }) {
  const [split, setSplit] = useState<SplitName>('train');
  const [records, setRecords] = useState<unknown[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setRecords(null);
    api<{ records: unknown[] }>('GET', `/v1/datasets/${encodeURIComponent(dataset.id)}/preview?split=${split}&n=${PREVIEW_RECORDS}`)
      .then((r) => (setRecords(r.records), setError(null)))
      .catch((e: Error) => setError(e.message));
  }, [dataset.id, split]);
  const splits = dataset.splits;
  const tokens = splits ? SPLIT_NAMES.reduce<number | null>((sum, s) => (sum === null || splits[s].tokens === null ? null : sum + splits[s].tokens!), 0) : null;

  return (
    <div class="dataset-summary" data-dataset={dataset.id}>
      <h3>
        {dataset.name} v{dataset.version}
      </h3>
      <table class="counts">
        <thead>
          <tr>
            <th>Split</th>
            <th>Records</th>
            <th>Tokens</th>
          </tr>
        </thead>
        <tbody>
          {SPLIT_NAMES.map((s) => (
            <tr data-split={s}>
              <td>{s}</td>
              <td>{splits ? splits[s].num_records : '—'}</td>
              <td>{splits?.[s].tokens ?? '—'}</td>
            </tr>
          ))}
          <tr class="total">
            <td>all</td>
            <td>{dataset.num_records}</td>
            <td data-testid="dataset-tokens">{tokens ?? '—'}</td>
          </tr>
        </tbody>
      </table>
      <div class="preview-head">
        <span>Preview:</span>
        {SPLIT_NAMES.map((s) => (
          <button type="button" class={s === split ? 'link active' : 'link'} onClick={() => setSplit(s)}>
            {s}
          </button>
        ))}
      </div>
      {error && <p class="error">{error}</p>}
      {records && (
        <ol class="preview" data-testid="dataset-preview">
          {records.map((r) => (
            <li>
              <Record record={r} />
            </li>
          ))}
        </ol>
      )}
    </div>
  );
}

/** A chat record as its turns; anything else as its JSON. */
function Record({ record }: { record: unknown }) {
  const messages = (record as { messages?: unknown } | null)?.messages;
  if (!Array.isArray(messages)) return <pre>{JSON.stringify(record)}</pre>;
  return (
    <>
      {(messages as { role?: string; content?: unknown }[]).map((m) => (
        <div class={`turn turn-${m.role ?? 'unknown'}`}>
          <b>{m.role}</b> {typeof m.content === 'string' ? m.content : JSON.stringify(m.content)}
        </div>
      ))}
    </>
  );
}
