// A request built from the API's own JSON Schema (GET /openapi.json, rendered from contracts/): each setting's
// kind and default as the schema states them, and a section's value from what a person edited (only the edits are
// sent; the API fills in the rest from the same schema). No DOM here: schema-form.tsx draws the fields.

/** The part of JSON Schema that zod's rendering of the request uses. */
export interface JsonSchema {
  type?: string;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  default?: unknown;
  description?: string;
}

/** What a field holds, as the form edits it. */
export type FieldKind =
  | { kind: 'number'; integer: boolean; nullable: boolean }
  | { kind: 'boolean' }
  | { kind: 'enum'; options: string[]; nullable: boolean }
  | { kind: 'text'; nullable: boolean }
  | { kind: 'list' };

/** Edits by `section.field`: the text typed (or the box ticked). */
export type Edits = Record<string, string | boolean>;

/** A field the form can edit, or null (objects, paths the server fills in, anything else). */
export function fieldKind(schema: JsonSchema): FieldKind | null {
  const members = schema.anyOf ?? [schema];
  const nullable = members.some((m) => m.type === 'null');
  const base = members.filter((m) => m.type !== 'null');
  if (base.length !== 1) return null;
  const s = base[0]!;
  if (s.enum) return { kind: 'enum', options: s.enum.map(String), nullable };
  if (s.type === 'boolean') return { kind: 'boolean' };
  if (s.type === 'integer' || s.type === 'number') return { kind: 'number', integer: s.type === 'integer', nullable };
  if (s.type === 'string') return { kind: 'text', nullable };
  if (s.type === 'array' && s.items?.type === 'string') return { kind: 'list' };
  return null;
}

/** A field's default: its own, else the one its section's default object gives it (required fields have only that). */
export function defaultOf(section: JsonSchema, field: string): unknown {
  const own = section.properties?.[field]?.default;
  if (own !== undefined) return own;
  const whole = section.default;
  return whole && typeof whole === 'object' ? (whole as Record<string, unknown>)[field] : undefined;
}

/** A value as the form shows it. */
export function shown(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (Array.isArray(value)) return value.join(', ');
  return String(value);
}

/**
 * The value sent for an edit. Text that is not a number is sent as typed, so the API refuses it naming the field;
 * an emptied nullable field is null; an emptied optional one is left out (undefined).
 */
export function parsed(kind: FieldKind, raw: string | boolean): unknown {
  if (kind.kind === 'boolean') return raw === true;
  const text = String(raw).trim();
  if (kind.kind === 'list') return text.split(',').map((t) => t.trim()).filter(Boolean);
  if (text === '') return 'nullable' in kind && kind.nullable ? null : undefined;
  if (kind.kind === 'number') return Number.isFinite(Number(text)) ? Number(text) : text;
  return text;
}

/**
 * One request section from its edits: its default object (where the schema gives one: the required fields' values)
 * with the edited fields over it; undefined when nothing was edited and the default is empty (the API's then).
 */
export function sectionValue(name: string, section: JsonSchema, edits: Edits): Record<string, unknown> | undefined {
  const base = section.default && typeof section.default === 'object' ? { ...(section.default as Record<string, unknown>) } : {};
  let edited = false;
  for (const [field, schema] of Object.entries(section.properties ?? {})) {
    const raw = edits[`${name}.${field}`];
    const kind = fieldKind(schema);
    if (raw === undefined || !kind) continue;
    const value = parsed(kind, raw);
    edited = true;
    if (value === undefined) delete base[field];
    else base[field] = value;
  }
  return edited || Object.keys(base).length > 0 ? base : undefined;
}

/** An API message split by field: `invalid request body: a.b: msg; c: msg` -> [{field a.b}, {field c}]. */
export function fieldErrors(message: string): { field: string | null; message: string }[] {
  return message
    .replace(/^invalid request body: /, '')
    .split('; ')
    .map((part) => {
      const m = /^([A-Za-z_][\w.[\]]*): (.+)$/s.exec(part);
      return m ? { field: m[1]!, message: m[2]! } : { field: null, message: part };
    });
}
