// Form fields drawn from the API's own JSON Schema (schema-values.ts): every setting of a request section with its
// default, so the console never restates a default and follows the contract when it changes.
import { defaultOf, fieldKind, shown, type Edits, type FieldKind, type JsonSchema } from './schema-values.js';

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
