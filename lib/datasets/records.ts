// The record forms an uploaded file may use, and their normalization to the chat form the trainer reads
// (contracts/trainer-job.ts: one {"messages":[{role,content}...]} per line).
import { z } from 'zod';

const NonEmptyTextSchema = z.string().refine((s) => /\S/.test(s), 'expected non-empty text');

export const ChatRoleSchema = z.enum(['system', 'user', 'assistant']);
export type ChatRole = z.infer<typeof ChatRoleSchema>;

export const ChatMessageSchema = z.object({ role: ChatRoleSchema, content: NonEmptyTextSchema });
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

/** Chat form. Unknown top-level keys are ignored; only `messages` is kept. */
export const ChatRecordSchema = z
  .object({ messages: z.array(ChatMessageSchema).min(1, 'expected at least one message') })
  .superRefine(({ messages }, ctx) => {
    if (messages.length > 0 && !messages.some((m) => m.role === 'user')) {
      ctx.addIssue({ code: 'custom', path: ['messages'], message: 'expected at least one message with role "user"' });
    }
    const last = messages.at(-1);
    // An invalid role has already been reported by the enum; don't pile a second issue on it.
    if (last && last.role !== 'assistant' && ChatRoleSchema.safeParse(last.role).success) {
      ctx.addIssue({
        code: 'custom',
        path: ['messages', messages.length - 1, 'role'],
        message: `the last message must be from the assistant, got "${last.role}"`,
      });
    }
  });
export type ChatRecord = { messages: ChatMessage[] };

const OptionalTextSchema = z.string().nullish();

/** Instruction form; `output` is accepted as an alias of `response`. */
export const InstructionRecordSchema = z
  .object({
    instruction: NonEmptyTextSchema,
    input: OptionalTextSchema,
    response: NonEmptyTextSchema.optional(),
    output: NonEmptyTextSchema.optional(),
    system: OptionalTextSchema,
  })
  .superRefine((r, ctx) => {
    if (r.response === undefined && r.output === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['response'],
        message: 'required field is missing (expected string; "output" is accepted as an alias)',
      });
    } else if (r.response !== undefined && r.output !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['output'],
        message: '"output" is an alias of "response"; give one of them, not both',
      });
    }
  });
export type InstructionRecord = z.infer<typeof InstructionRecordSchema>;

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
