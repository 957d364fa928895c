// The records a dataset file may hold (spec 000 datasets; chat `messages` form or instruction/response form).
// Shared by the preprocessing in datasets/ingest and the API.
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
