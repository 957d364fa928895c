// Every location a caller names (an artifact path, an MLflow source, a base model, a tokenizer, a dataset URI)
// passes through checkLocation before anything reads or writes it. A location is checked as its readers will see
// it: percent-encoding is decoded until it stops changing (`%252e%252e` is `..` to a reader that decodes twice),
// and characters that NFKC folds to `.` or `/` (U+2024 ONE DOT LEADER, U+FF0E, U+FF0F) are refused, since some
// layer on the way may fold them. What is returned is the decoded text, which is what the caller must use.
import { pathToFileURL } from 'node:url';

/** Relative (`model/weights`), absolute (`/data/x`), or a URI with a scheme (`s3://b/k`, `runs:/id/p`). */
export type LocationForm = 'relative' | 'absolute' | 'uri';

export interface LocationRule {
  /** The field as the caller spelled it (`artifact_path`, `dataset.source_uri`): every refusal names it. */
  field: string;
  /** The forms this field may take; any other is refused. */
  accept: readonly LocationForm[];
  /** For URIs: the schemes this field may use (lower case, without the colon); all when left out. */
  schemes?: readonly string[];
  /** Whether the empty location (the root of what it is relative to) is allowed. */
  allowEmpty?: boolean;
}

export interface CheckedLocation {
  form: LocationForm;
  /** The URI scheme in lower case, or null for a path. */
  scheme: string | null;
  /** The decoded path: for a relative one without empty or `.` segments; for a URI, what follows its authority. */
  path: string;
  /** The canonical text to use in place of the raw one (a file:// URI re-encoded from its decoded path). */
  text: string;
}

/** A location refused: the message names the field and says what is wrong with it. */
export class LocationError extends Error {
  constructor(
    readonly field: string,
    readonly raw: string,
    /** What is wrong, as a predicate of the location: `has a backslash`. */
    readonly problem: string,
    /** Whether the refusal is a climb out of where the location is anchored (a `..` segment after decoding). */
    readonly escapes = false,
  ) {
    super(`${field}: "${raw}" ${problem}`);
  }
}

/** Passes of percent-decoding before a location is taken as hostile: real inputs settle in one or two. */
const MAX_DECODES = 8;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** A URI's scheme, when a `/` (or nothing) follows it: `checkpoint:100/x` is a relative path with a colon in it. */
const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):(?=\/|$)/;
const DRIVE = /^[A-Za-z]:([\\/]|$)/;

/** Decodes `%XX` escapes until the text stops changing; malformed escapes (`%zz`, overlong UTF-8) are refused. */
export function decodeFully(text: string, field: string): string {
  let out = text;
  for (let i = 0; i < MAX_DECODES; i++) {
    let next: string;
    try {
      next = decodeURIComponent(out);
    } catch {
      throw new LocationError(field, text, 'is not valid percent-encoding');
    }
    if (next === out) return out;
    out = next;
  }
  throw new LocationError(field, text, `is percent-encoded more than ${MAX_DECODES} times`);
}

/** A character that is not `.`, `/` or `\` but that NFKC folds into one of them (U+2024, U+FF0E, U+FF0F, U+FE52 ...). */
function lookAlike(segment: string): string | undefined {
  for (const ch of segment) {
    if (ch === '.' || ch === '/' || ch === '\\') continue;
    if (/[./\\]/.test(ch.normalize('NFKC'))) return ch;
  }
  return undefined;
}

const codePoint = (ch: string): string => `U+${ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;

/** One `/`-separated segment of the raw text, decoded and checked on its own (so `%2f` cannot make a separator). */
function checkSegment(raw: string, rule: LocationRule, whole: string): string {
  const refuse = (problem: string, escapes = false) => new LocationError(rule.field, whole, problem, escapes);
  let segment: string;
  try {
    segment = decodeFully(raw, rule.field);
  } catch (err) {
    if (err instanceof LocationError) throw refuse(err.problem);
    throw err;
  }
  if (segment.includes('/')) throw refuse('has an encoded "/" (%2f) inside a path segment');
  if (segment.includes('\\')) throw refuse('has a backslash: "/" is the only separator');
  if (CONTROL.test(segment)) throw refuse('has a control character');
  const alike = lookAlike(segment);
  if (alike) throw refuse(`has ${codePoint(alike)}, which reads as "${alike.normalize('NFKC')}"`);
  if (segment === '..') throw refuse('escapes its root: ".." segments are not allowed', true);
  return segment;
}

function formOf(decoded: string): LocationForm {
  if (DRIVE.test(decoded)) return 'absolute';
  if (SCHEME.test(decoded)) return 'uri';
  return decoded.startsWith('/') ? 'absolute' : 'relative';
}

const clean = (segments: string[]): string[] => segments.filter((s) => s !== '' && s !== '.');

/**
 * Checks a caller-supplied location against `rule` and returns its canonical form, or throws LocationError naming
 * the field. Refused: malformed or over-deep percent-encoding, `..` after decoding, `%2f` inside a segment,
 * backslashes, control characters, NFKC look-alikes of `.` and `/`, and a form or scheme the rule does not accept.
 */
export function checkLocation(raw: string, rule: LocationRule): CheckedLocation {
  const decoded = raw
    .split('/')
    .map((s) => checkSegment(s, rule, raw))
    .join('/');
  const form = formOf(decoded);
  if (!rule.accept.includes(form)) throw new LocationError(rule.field, raw, `is ${describeForm(form)}; expected ${rule.accept.map(describeForm).join(' or ')}`);
  if (form === 'relative') {
    const path = clean(decoded.split('/')).join('/');
    if (path === '' && !rule.allowEmpty) throw new LocationError(rule.field, raw, 'names no path');
    return { form, scheme: null, path, text: path };
  }
  if (form === 'absolute') {
    if (DRIVE.test(decoded)) throw new LocationError(rule.field, raw, 'is a drive path');
    const path = `/${clean(decoded.split('/')).join('/')}`;
    return { form, scheme: null, path, text: path };
  }
  return checkUri(raw, decoded, rule);
}

function checkUri(raw: string, decoded: string, rule: LocationRule): CheckedLocation {
  const scheme = SCHEME.exec(decoded)![1]!.toLowerCase();
  if (rule.schemes && !rule.schemes.includes(scheme)) throw new LocationError(rule.field, raw, `uses the scheme ${scheme}:, expected ${rule.schemes.map((s) => `${s}:`).join(' or ')}`);
  const rest = decoded.slice(scheme.length + 1);
  const authority = rest.startsWith('//') ? rest.slice(2).split('/')[0]! : null;
  const path = authority === null ? rest : rest.slice(2 + authority.length);
  if (scheme === 'file') {
    if (authority !== null && authority !== '' && authority !== 'localhost') throw new LocationError(rule.field, raw, `names a remote host (${authority}) in a file: URI`);
    if (!path.startsWith('/')) throw new LocationError(rule.field, raw, 'is a file: URI without an absolute path');
    const canonical = `/${clean(path.split('/')).join('/')}`;
    return { form: 'uri', scheme, path: canonical, text: pathToFileURL(canonical).href };
  }
  return { form: 'uri', scheme, path, text: `${scheme}:${authority === null ? '' : `//${authority}`}${path}` };
}

function describeForm(form: LocationForm): string {
  return form === 'relative' ? 'a relative path' : form === 'absolute' ? 'an absolute path' : 'a URI';
}

/**
 * Whether an object key would climb out of where a store anchors it once something on the way decodes it: a `..`
 * segment after decoding every valid escape (repeatedly), folding NFKC look-alikes and reading `\` as `/`, or a NUL.
 * Laxer than checkLocation, because keys are also made from names the product allows (a model named `100% lora`):
 * a `%` that escapes nothing is taken as itself.
 */
export function keyClimbsOut(key: string): boolean {
  let text = key;
  for (let i = 0; i < MAX_DECODES; i++) {
    const next = text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run;
      }
    });
    if (next === text) break;
    text = next;
  }
  return text.includes('\0') || text.normalize('NFKC').replaceAll('\\', '/').split('/').includes('..');
}
