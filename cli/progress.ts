// Following a pipeline from the terminal: a progress bar for training, one line per stage change.
import type { ApiClient } from './api-client.js';
import type { PipelineProgress, PipelineResult, ReloadStatus } from '../contracts/pipeline.js';

export interface PipelineStatus {
  id: string;
  status: string;
  progress: PipelineProgress;
  result: PipelineResult | null;
  temporal_ui_url: string | null;
}

function bar(fraction: number, width = 30): string {
  const filled = Math.round(Math.max(0, Math.min(1, fraction)) * width);
  return '[' + '#'.repeat(filled) + '-'.repeat(width - filled) + ']';
}

/** One line for the reload hook after promotion (promotion.webhook_url), or null when there is none. */
export function describeReload(r: ReloadStatus | null | undefined): string | null {
  if (!r) return null;
  if (r.status === 'pending') return `reload hook: retrying until delivered (deadline ${r.deadline})`;
  if (r.status === 'delivered') return `reload hook: delivered (HTTP ${r.http_status}, attempt ${r.attempts}, event ${r.event_id})`;
  return `reload hook: FAILED, the version stays in production: ${r.error}`;
}

/** Polls until the pipeline leaves the running state or reaches `until` (e.g. awaiting approval). */
export async function followPipeline(
  api: ApiClient,
  id: string,
  opts: { until?: (s: PipelineStatus) => boolean; out?: NodeJS.WriteStream; intervalMs?: number; lastStage?: string } = {},
): Promise<PipelineStatus> {
  const out = opts.out ?? process.stderr;
  let lastStage = opts.lastStage ?? '';
  let lastLine = '';
  let lastReload: string | null = null;
  for (;;) {
    const s = await api.get<PipelineStatus>(`/v1/pipelines/${id}`);
    const p = s.progress;
    if (p.stage !== lastStage) {
      if (lastStage === 'train' && out.isTTY) out.write('\n');
      out.write(`stage: ${p.stage}${p.dataset ? `  (dataset ${p.dataset.name} v${p.dataset.version})` : ''}\n`);
      lastStage = p.stage;
    }
    if (p.stage === 'train') {
      const loss = p.latest_metrics['train/loss'];
      const line = `  ${bar(p.step / p.max_steps)} step ${p.step}/${p.max_steps}${loss !== undefined ? `  loss ${loss.toFixed(4)}` : ''}${p.last_checkpoint ? `  ckpt ${p.last_checkpoint}` : ''}`;
      if (line !== lastLine) out.write(out.isTTY ? `\r${line}` : `${line}\n`);
      lastLine = line;
    }
    const reload = describeReload(p.reload);
    if (reload && reload !== lastReload) out.write(`  ${reload}\n`);
    lastReload = reload;
    if (s.status !== 'RUNNING' || opts.until?.(s)) return s;
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? (out.isTTY ? 1000 : 5000)));
  }
}
