// The record forms an uploaded file may use, and their normalization to the chat form the trainer reads
// (contracts/trainer-job.ts: one {"messages":[{role,content}...]} per line).
import { z } from 'zod';

export {
  ChatRoleSchema,
  ChatMessageSchema,
  ChatRecordSchema,
  InstructionRecordSchema,
  type ChatRole,
  type ChatMessage,
  type ChatRecord,
  type InstructionRecord,
} from '../../contracts/dataset-records.js';
import { ChatMessageSchema, ChatRecordSchema, InstructionRecordSchema, type ChatMessage, type ChatRecord, type InstructionRecord } from '../../contracts/dataset-records.js';

export type RecordForm = 'messages' | 'instruction' | 'preference';

/** An answer of a preference pair: one assistant message as plain text, or a list of assistant messages. */
const AnswerSchema = z.union([z.string().refine((s) => /\S/.test(s), 'expected non-empty text'), z.array(ChatMessageSchema).min(1, 'expected at least one message')], {
  error: (issue) => (issue.input === undefined ? 'required field is missing (expected text or a list of assistant messages)' : 'expected text or a list of assistant messages'),
});

/** Preference form (DPO / ORPO): the conversation so far, a better answer and a worse one. */
export const PreferenceRecordSchema = z
  .object({ prompt: z.array(ChatMessageSchema).min(1, 'expected at least one message'), chosen: AnswerSchema, rejected: AnswerSchema })
  .superRefine((r, ctx) => {
    const last = r.prompt.at(-1);
    if (last && last.role === 'assistant') {
      ctx.addIssue({ code: 'custom', path: ['prompt', r.prompt.length - 1, 'role'], message: 'the prompt must end before the answer, got "assistant"' });
    }
    for (const name of ['chosen', 'rejected'] as const) {
      const answer = r[name];
      if (Array.isArray(answer)) {
        answer.forEach((m, i) => {
          if (m.role !== 'assistant') ctx.addIssue({ code: 'custom', path: [name, i, 'role'], message: `expected "assistant", got "${m.role}"` });
        });
      }
    }
    if (JSON.stringify(asMessages(r.chosen)) === JSON.stringify(asMessages(r.rejected))) {
      ctx.addIssue({ code: 'custom', path: ['rejected'], message: 'identical to chosen (a pair needs two different answers)' });
    }
  });
export type PreferenceRecord = { prompt: ChatMessage[]; chosen: ChatMessage[]; rejected: ChatMessage[] };
/** What preprocessing writes to the split files: one form per dataset. */
export type DatasetRecord = ChatRecord | PreferenceRecord;

function asMessages(answer: string | { role: string; content: string }[]): ChatMessage[] {
  return typeof answer === 'string' ? [{ role: 'assistant', content: answer }] : answer.map((m) => ({ role: m.role as ChatMessage['role'], content: m.content }));
}

export interface FieldProblem {
  field: string | null;
  message: string;
}

export type Normalized<R extends DatasetRecord = ChatRecord> = { ok: true; record: R } | { ok: false; problems: FieldProblem[] };

export function normalizeChatRecord(value: unknown): Normalized {
  const parsed = ChatRecordSchema.safeParse(value, { reportInput: true });
  if (!parsed.success) return { ok: false, problems: parsed.error.issues.map(describeZodIssue) };
  const messages = parsed.data.messages.map((m) => ({ role: m.role, content: m.content }));
  return { ok: true, record: { messages } };
}

export function normalizeInstructionRecord(value: unknown): Normalized {
  const parsed = InstructionRecordSchema.safeParse(value, { reportInput: true });
  if (!parsed.success) return { ok: false, problems: parsed.error.issues.map(describeZodIssue) };
  return { ok: true, record: instructionToChat(parsed.data) };
}

export function normalizePreferenceRecord(value: unknown): Normalized<PreferenceRecord> {
  const parsed = PreferenceRecordSchema.safeParse(value, { reportInput: true });
  if (!parsed.success) return { ok: false, problems: parsed.error.issues.map(describeZodIssue) };
  const prompt = parsed.data.prompt.map((m) => ({ role: m.role, content: m.content }));
  return { ok: true, record: { prompt, chosen: asMessages(parsed.data.chosen), rejected: asMessages(parsed.data.rejected) } };
}

/** system (when given) + user = instruction [+ blank line + input] + assistant = response. */
export function instructionToChat(r: InstructionRecord): ChatRecord {
  const messages: ChatMessage[] = [];
  if (r.system && /\S/.test(r.system)) messages.push({ role: 'system', content: r.system });
  const user = r.input && /\S/.test(r.input) ? `${r.instruction}\n\n${r.input}` : r.instruction;
  messages.push({ role: 'user', content: user });
  messages.push({ role: 'assistant', content: (r.response ?? r.output) as string });
  return { messages };
}

/** Keys in a fixed order, so equal records serialize to identical bytes (dedup and split hashing rely on it). */
export function canonicalJson(record: DatasetRecord): string {
  const clean = (ms: ChatMessage[]) => ms.map((m) => ({ role: m.role, content: m.content }));
  if ('prompt' in record) return JSON.stringify({ prompt: clean(record.prompt), chosen: clean(record.chosen), rejected: clean(record.rejected) });
  return JSON.stringify({ messages: clean(record.messages) });
}

/** ['messages', 2, 'role'] -> 'messages[2].role' */
export function fieldPath(path: readonly PropertyKey[]): string | null {
  let out = '';
  for (const part of path) {
    out += typeof part === 'number' ? `[${part}]` : `${out === '' ? '' : '.'}${String(part)}`;
  }
  return out === '' ? null : out;
}

function describeZodIssue(issue: z.core.$ZodIssue): FieldProblem {
  return { field: fieldPath(issue.path), message: zodIssueMessage(issue) };
}

function zodIssueMessage(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.input === undefined
        ? `required field is missing (expected ${issue.expected})`
        : `expected ${issue.expected}, got ${typeName(issue.input)}`;
    case 'invalid_value':
      return `expected one of ${issue.values.map(String).join(', ')}, got ${preview(issue.input)}`;
    default:
      return issue.message;
  }
}

/** The offending value as JSON, cut short so a huge value doesn't flood the message. */
function preview(value: unknown): string {
  const json = JSON.stringify(value) ?? String(value);
  return json.length > 60 ? `${json.slice(0, 57)}...` : json;
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}
