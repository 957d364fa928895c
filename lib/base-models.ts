// Base models are directories in the Hugging Face layout (config.json, model.safetensors, tokenizer.json).
// A name resolves in the base-models directory (trainer.base_models_dir, where a deployment mounts them); without
// that setting, the bundled "hanzo-tiny-llama" is the one the bootstrap built.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../contracts/config.js';
import type { Bootstrap } from './config.js';
import { checkLocation, LocationError, type CheckedLocation } from './locations.js';

export const DEFAULT_BASE_MODEL = 'hanzo-tiny-llama';

export class BaseModelError extends Error {}

/** A name stays inside the base-models directory: no `..` at any depth of decoding, no look-alike dots. */
function checkedName(name: string): CheckedLocation {
  try {
    return checkLocation(name, { field: 'base model', accept: ['relative', 'absolute'] });
  } catch (err) {
    if (err instanceof LocationError) throw new BaseModelError(`"${name}" is not a base model name or path: it ${err.problem}`);
    throw err;
  }
}

export function resolveBaseModel(name: string, config: Config, bootstrap: Bootstrap): string {
  const loc = checkedName(name);
  const dir = loc.form === 'absolute'
    ? loc.path
    : name === DEFAULT_BASE_MODEL && bootstrap.base_model && !config.trainer.base_models_dir
      ? bootstrap.base_model
      : join(config.trainer.base_models_dir ?? bootstrap.base_models_dir, loc.path);
  if (!existsSync(join(dir, 'config.json')) || !existsSync(join(dir, 'tokenizer.json')))
    throw new BaseModelError(`base model "${name}" not found: ${dir} has no config.json and tokenizer.json`);
  return dir;
}

/** The recorded checksums of a base model (base-model.json written when it was built), or null. */
export function baseModelRecord(dir: string): Record<string, unknown> | null {
  const file = join(dir, 'base-model.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>) : null;
}
