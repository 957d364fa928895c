// Base models are directories in the Hugging Face layout (config.json, model.safetensors, tokenizer.json).
// A name resolves in the base-models directory (trainer.base_models_dir, where a deployment mounts them); without
// that setting, the bundled "hanzo-tiny-llama" is the one the bootstrap built.
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import type { Config } from '../contracts/config.js';
import type { Bootstrap } from './config.js';

export const DEFAULT_BASE_MODEL = 'hanzo-tiny-llama';

export class BaseModelError extends Error {}

export function resolveBaseModel(name: string, config: Config, bootstrap: Bootstrap): string {
  const dir = isAbsolute(name)
    ? name
    : name === DEFAULT_BASE_MODEL && bootstrap.base_model && !config.trainer.base_models_dir
      ? bootstrap.base_model
      : join(config.trainer.base_models_dir ?? bootstrap.base_models_dir, name);
  if (!existsSync(join(dir, 'config.json')) || !existsSync(join(dir, 'tokenizer.json')))
    throw new BaseModelError(`base model "${name}" not found: ${dir} has no config.json and tokenizer.json`);
  return dir;
}

/** The recorded checksums of a base model (base-model.json written when it was built), or null. */
export function baseModelRecord(dir: string): Record<string, unknown> | null {
  const file = join(dir, 'base-model.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>) : null;
}
