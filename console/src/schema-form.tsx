// Form fields drawn from the API's own JSON Schema (GET /openapi.json, rendered from contracts/): every setting of
// a request section with its default, so the console never restates a default and follows the contract when it
// changes. Only the fields a person edits are sent; the API fills in the rest from the same schema.

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

interface SectionProps {
  name: string;
  title: string;
  schema: JsonSchema;
  edits: Edits;
  onEdit: (path: string, value: string | boolean | undefined) => void;
  /** messages of the API by field path (`hyperparameters.max_steps`) */
  errors: Record<string, string>;
  /** fields the form leaves to the server (paths on this machine, for instance) */
  skip?: string[];
}

/** A fieldset of every editable field of a section, each showing its default until edited. */
export function SchemaSection({ name, title, schema, edits, onEdit, errors, skip = [] }: SectionProps) {
  const fields = Object.entries(schema.properties ?? {}).filter(([field, s]) => !skip.includes(field) && fieldKind(s) !== null);
  return (
    <fieldset class="schema-section" data-section={name}>
      <legend>{title}</legend>
      {fields.map(([field, s]) => {
        const path = `${name}.${field}`;
        const fallback = defaultOf(schema, field);
        return (
          <SchemaField
            key={path}
            path={path}
            kind={fieldKind(s)!}
            description={s.description}
            fallback={fallback}
            value={edits[path]}
            error={errors[path]}
            onEdit={(v) => onEdit(path, v === (typeof v === 'boolean' ? fallback === true : shown(fallback)) ? undefined : v)}
          />
        );
      })}
    </fieldset>
  );
}

interface FieldProps {
  path: string;
  kind: FieldKind;
  description: string | undefined;
  fallback: unknown;
  value: string | boolean | undefined;
  error: string | undefined;
  onEdit: (value: string | boolean) => void;
}

function SchemaField({ path, kind, description, fallback, value, error, onEdit }: FieldProps) {
  const id = `field-${path}`;
  const label = path.slice(path.indexOf('.') + 1);
  const hint = `default: ${fallback === undefined ? 'none' : fallback === null ? 'null' : shown(fallback) || '""'}${description ? ` · ${description}` : ''}`;
  const common = { id, name: path, title: hint, 'aria-invalid': error ? true : undefined, class: value !== undefined ? 'edited' : undefined };
  let input;
  if (kind.kind === 'boolean') {
    input = <input type="checkbox" {...common} checked={value === undefined ? fallback === true : value === true} onChange={(e) => onEdit(e.currentTarget.checked)} />;
  } else if (kind.kind === 'enum') {
    input = (
      <select {...common} value={value === undefined ? shown(fallback) : String(value)} onChange={(e) => onEdit(e.currentTarget.value)}>
        {kind.nullable && <option value="">null</option>}
        {kind.options.map((o) => (
          <option value={o}>{o}</option>
        ))}
      </select>
    );
  } else {
    input = <input type="text" inputMode={kind.kind === 'number' ? 'decimal' : undefined} {...common} value={value === undefined ? shown(fallback) : String(value)} placeholder={fallback === null ? 'null' : undefined} onInput={(e) => onEdit(e.currentTarget.value)} />;
  }
  return (
    <div class="schema-field">
      <label for={id}>{label}</label>
      {input}
      <span class="muted small">{error ? <span class="error">{error}</span> : hint}</span>
    </div>
  );
}
