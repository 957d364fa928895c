// checkLocation, the one check every caller-supplied location passes: what it refuses, what it returns.
import { describe, expect, it } from 'vitest';
import { checkLocation, keyClimbsOut, LocationError, type LocationRule } from '../lib/locations.js';

const relative: LocationRule = { field: 'artifact_path', accept: ['relative'], allowEmpty: true };
const anyForm: LocationRule = { field: 'source', accept: ['relative', 'absolute', 'uri'] };

function refusal(raw: string, rule: LocationRule): LocationError {
  try {
    checkLocation(raw, rule);
  } catch (err) {
    if (err instanceof LocationError) return err;
    throw err;
  }
  throw new Error(`"${raw}" was accepted`);
}

describe('checkLocation', () => {
  it('refuses ".." however it is encoded, and says the location escapes', () => {
    const climbs = ['../x', 'a/../../x', '%2e%2e/x', '%2E%2E/%2e%2e/etc/hostname', '.%2e/x', '%252e%252e/x', '%25252e%25252e/x', `${'%2e%2e/'.repeat(9)}etc/hostname`];
    for (const raw of climbs) {
      const err = refusal(raw, relative);
      expect([raw, err.escapes, err.message]).toEqual([raw, true, expect.stringMatching(/^artifact_path: .* escapes its root/)]);
    }
  });

  it('refuses an encoded "/" inside a segment, backslashes and control characters', () => {
    expect(refusal('..%2f..%2fetc', relative).message).toMatch(/encoded "\/" \(%2f\)/);
    expect(refusal('a%252fb', relative).message).toMatch(/%2f/);
    expect(refusal('..\\..\\etc\\hostname', relative).message).toMatch(/backslash/);
    expect(refusal('a%5c..%5cb', relative).message).toMatch(/backslash/);
    expect(refusal('a%00b', relative).message).toMatch(/control character/);
    expect(refusal('a\nb', relative).message).toMatch(/control character/);
  });

  it('refuses characters that NFKC folds into "." or "/", naming the code point', () => {
    expect(refusal('\u2024\u2024/etc/hostname', relative).message).toMatch(/U\+2024, which reads as "\."/);
    expect(refusal('\uff0e\uff0e/x', relative).message).toMatch(/U\+FF0E/);
    expect(refusal('a\uff0fb', relative).message).toMatch(/U\+FF0F, which reads as "\/"/);
    expect(refusal('%E2%80%A4%E2%80%A4/x', relative).message).toMatch(/U\+2024/);
    expect(refusal('\u2025/x', relative).message).toMatch(/U\+2025/);
  });

  it('refuses malformed percent-encoding', () => {
    expect(refusal('a%zzb', relative).message).toMatch(/not valid percent-encoding/);
    expect(refusal('%c0%ae%c0%ae/x', relative).message).toMatch(/not valid percent-encoding/);
  });

  it('refuses a form the field does not take: absolute paths, URIs and drive paths where a relative path is expected', () => {
    expect(refusal('/etc/hostname', relative).message).toMatch(/is an absolute path; expected a relative path/);
    expect(refusal('%2fetc/hostname', relative).message).toMatch(/%2f/);
    expect(refusal('file:///etc/hostname', relative).message).toMatch(/is a URI; expected a relative path/);
    expect(refusal('C:/Windows', relative).message).toMatch(/absolute path/);
    expect(refusal('ftp://host/x', { field: 'dataset.source_uri', accept: ['uri'], schemes: ['file', 's3'] }).message).toMatch(/^dataset\.source_uri: .* uses the scheme ftp:/);
    expect(refusal('file://evil.example/etc/x', anyForm).message).toMatch(/remote host/);
    expect(refusal('', { field: 'f', accept: ['relative'] }).message).toMatch(/names no path/);
  });

  it('returns the decoded, canonical form of what it accepts', () => {
    expect(checkLocation('./model//weights/', relative)).toEqual({ form: 'relative', scheme: null, path: 'model/weights', text: 'model/weights' });
    expect(checkLocation('my%20model/a..b/....', relative).path).toBe('my model/a..b/....');
    expect(checkLocation('', relative).path).toBe('');
    expect(checkLocation('/data//sets/./x.jsonl', anyForm)).toMatchObject({ form: 'absolute', path: '/data/sets/x.jsonl' });
    expect(checkLocation('file:///data/a%20b.jsonl', anyForm)).toMatchObject({ form: 'uri', scheme: 'file', path: '/data/a b.jsonl', text: 'file:///data/a%20b.jsonl' });
    expect(checkLocation('s3://bucket/org/x.jsonl', anyForm)).toMatchObject({ scheme: 's3', path: '/org/x.jsonl', text: 's3://bucket/org/x.jsonl' });
    expect(checkLocation('runs:/abc/model', anyForm)).toMatchObject({ scheme: 'runs', path: '/abc/model' });
    expect(checkLocation('mlflow-artifacts:/0/abc/artifacts/model', anyForm).scheme).toBe('mlflow-artifacts');
    expect(checkLocation('models:/m/1', anyForm).text).toBe('models:/m/1');
    // Accented names are names, not separators: only look-alikes of "." and "/" are refused.
    expect(checkLocation('café/modèle', relative).path).toBe('café/modèle');
    // A colon is a name's character unless it opens a URI (`scheme:/`).
    expect(checkLocation('checkpoint:100/model.bin', relative).path).toBe('checkpoint:100/model.bin');
  });
});

describe('keyClimbsOut, the object stores\' own guard', () => {
  it('sees ".." through any depth of encoding, look-alikes and backslashes', () => {
    for (const key of ['a/../b', 'a/%2e%2e/b', 'a/%252E%252E/b', 'a/..%2fb', 'a/..%5cb', 'a\\..\\b', 'a/\u2024\u2024/b', 'a/\uff0e\uff0e\uff0fb', 'a/%00/b'])
      expect([key, keyClimbsOut(key)]).toEqual([key, true]);
  });

  it('takes a "%" that escapes nothing as itself, so names the product allows stay keys', () => {
    for (const key of ['dev/100% lora/v1/safetensors/model.safetensors', 'dev/a..b/v1', 'dev/model %zz/v2', 'experiments/0/r/artifacts/....'])
      expect([key, keyClimbsOut(key)]).toEqual([key, false]);
  });
});
