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
import { ChatRecordSchema, InstructionRecordSchema, type ChatMessage, type ChatRecord, type InstructionRecord } from '../../contracts/dataset-records.js';

export type RecordForm = 'messages' | 'instruction';

export interface FieldProblem {
  field: string | null;
  message: string;
}

export type Normalized = { ok: true; record: ChatRecord } | { ok: false; problems: FieldProblem[] };

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
export function canonicalJson(record: ChatRecord): string {
  return JSON.stringify({ messages: record.messages.map((m) => ({ role: m.role, content: m.content })) });
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
