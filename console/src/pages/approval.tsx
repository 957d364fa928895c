// A pipeline waiting for approval: the promotion gate's report (the candidate against the base model and the
// production version, per metric, with the interval of each comparison and the retention of general ability) and,
// for approvers, approve or reject with a reason. The buttons are a courtesy: the API refuses anyone else anyway.
import { useEffect, useState } from 'preact/hooks';
import type { SessionView } from '../../../contracts/console-session.js';
import type { GateDecision } from '../../../contracts/eval-suite.js';
import type { PipelineProgress } from '../../../contracts/pipeline.js';
import { api } from '../api.js';
import { num } from '../format.js';

interface PipelineView {
  id: string;
  status: string;
  progress: PipelineProgress;
  temporal_ui_url: string | null;
}

export function ApprovalPage({ id, session }: { id: string; session: SessionView }) {
  const [pipeline, setPipeline] = useState<PipelineView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [reason, setReason] = useState('');
  const [result, setResult] = useState<string | null>(null);
  const load = () =>
    api<PipelineView>('GET', `/v1/pipelines/${encodeURIComponent(id)}`)
      .then((p) => (setPipeline(p), setError(null)))
      .catch((e: Error) => setError(e.message));
  useEffect(() => {
    void load();
  }, [id]);

  const decide = async (decision: 'approve' | 'reject') => {
    try {
      await api('POST', `/v1/pipelines/${encodeURIComponent(id)}/${decision}`, { reason });
      setResult(decision === 'approve' ? 'Approved: the model version moves to production.' : 'Rejected.');
      await load();
    } catch (err) {
      setResult((err as Error).message);
    }
  };

  if (error) return <main><p class="error">{error}</p></main>;
  if (!pipeline) return <main><p class="muted">loading…</p></main>;
  const p = pipeline.progress;
  return (
    <main class="approval">
      <h1>Approval: {p.model_version ? `${p.model_version.name} v${p.model_version.version}` : id}</h1>
      <p class="muted">
        pipeline {id} · stage {p.stage}
        {p.dataset && ` · dataset ${p.dataset.name} v${p.dataset.version}`}
        {pipeline.temporal_ui_url && (
          <>
            {' · '}
            <a href={pipeline.temporal_ui_url} target="_blank" rel="noreferrer">
              Temporal workflow
            </a>
          </>
        )}
      </p>
      {p.eval?.gate ? <GateReport gate={p.eval.gate} /> : <p class="muted">No gate report yet: the pipeline has not been evaluated.</p>}
      {p.decision && (
        <p class="decision">
          {p.decision.decision}d by {p.decision.approver}
          {p.decision.reason && `: ${p.decision.reason}`}
        </p>
      )}
      {p.awaiting_approval && session.approver && (
        <form class="decide" onSubmit={(e) => e.preventDefault()}>
          <label for="reason">Reason</label>
          <textarea id="reason" value={reason} onInput={(e) => setReason((e.target as HTMLTextAreaElement).value)} />
          <div class="actions">
            <button type="button" onClick={() => void decide('approve')}>
              Approve
            </button>
            <button type="button" class="danger" onClick={() => void decide('reject')}>
              Reject
            </button>
          </div>
        </form>
      )}
      {p.awaiting_approval && !session.approver && <p class="muted">Waiting for an approver: your role ({session.role}) cannot approve.</p>}
      {!p.awaiting_approval && !p.decision && <p class="muted">This pipeline is not waiting for approval.</p>}
      {result && <p role="status">{result}</p>}
    </main>
  );
}

function GateReport({ gate }: { gate: GateDecision }) {
  return (
    <section>
      <h2>
        Gate {gate.suite}: <span class={`verdict verdict-${gate.verdict ?? (gate.passed ? 'pass' : 'block')}`}>{gate.verdict ?? (gate.passed ? 'pass' : 'block')}</span>
      </h2>
      <p>{gate.reason}</p>
      <table class="gate">
        <thead>
          <tr>
            <th>Task</th>
            <th>Metric</th>
            <th>Against</th>
            <th>Candidate</th>
            <th>Reference</th>
            <th>Change</th>
            <th>{Math.round(gate.confidence * 100)}% interval</th>
            <th>Retention</th>
            <th>Limit</th>
            <th>Verdict</th>
          </tr>
        </thead>
        <tbody>
          {gate.comparisons.map((c) => (
            <tr>
              <td>{c.task}</td>
              <td>{c.metric}</td>
              <td>{c.against}</td>
              <td>{num(c.candidate)}</td>
              <td>{num(c.reference)}</td>
              <td>{c.change ?? (c.regression > 0 ? 'worse' : 'better')} ({num(c.regression * 100, 3)}%)</td>
              <td>
                [{num(c.ci[0])}, {num(c.ci[1])}]
              </td>
              <td>{c.retention === undefined || c.retention === null ? '—' : num(c.retention, 3)}</td>
              <td>{c.limit ?? c.max_regression ?? '—'}</td>
              <td>{c.verdict ?? (c.passed ? 'pass' : 'block')}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {gate.skipped.length > 0 && <p class="muted">Not compared: {gate.skipped.join(', ')}</p>}
    </section>
  );
}
