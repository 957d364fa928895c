import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig, ConfigError } from '../lib/config.js';

const home = () => mkdtempSync(join(tmpdir(), 'hanzo-ml-config-'));
const ROLE = 'arn:aws:iam::123456789012:role/hanzo-ml-jobs-{organization}';

describe('configuration', () => {
  it('applies spec defaults: port 8057, embedded catalogue and file:// objects', () => {
    const { config } = loadConfig({ HANZO_ML_HOME: home() });
    expect(config.server.port).toBe(8057);
    expect(config.database.url).toBeUndefined();
    expect(config.storage.endpoint).toBeUndefined();
    expect(config.storage.buckets.models).toBe('hanzo-models');
  });

  it('lets HANZO_ML_{SECTION}_{KEY} override the YAML file, nested keys and booleans included', () => {
    const h = home();
    writeFileSync(join(h, 'config.yaml'), 'server:\n  port: 9000\nmetrics:\n  enabled: true\n');
    const { config } = loadConfig({ HANZO_ML_HOME: h, HANZO_ML_SERVER_PORT: '8100', HANZO_ML_STORAGE_BUCKETS_MODELS: 'm', HANZO_ML_METRICS_ENABLED: 'false', HANZO_ML_STORAGE_ACCESS_KEY: 'k' });
    expect(config.server.port).toBe(8100);
    expect(config.storage.buckets.models).toBe('m');
    expect(config.metrics.enabled).toBe(false);
    expect(config.storage.access_key).toBe('k');
  });

  it('refuses an unknown scheduler.executor at start-up, naming the key and the choices', () => {
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_SCHEDULER_EXECUTOR: 'slurm' })).toThrow(/scheduler\.executor \(HANZO_ML_SCHEDULER_EXECUTOR\):.*"local".*"kubernetes"/s);
  });

  it('refuses the kubernetes executor without an S3 store that pods could reach', () => {
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_SCHEDULER_EXECUTOR: 'kubernetes' })).toThrow(/"kubernetes" needs an S3 object store.*storage\.endpoint/s);
    const { config } = loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_SCHEDULER_EXECUTOR: 'kubernetes', HANZO_ML_STORAGE_ENDPOINT: 'http://127.0.0.1:9000', HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: ROLE });
    expect(config.scheduler).toMatchObject({ executor: 'kubernetes', preemption: { grace_period: '300s' } });
    expect(config.storage.job_access).toEqual({ role_arn: ROLE, duration: '12h' });
  });

  it('refuses kubernetes jobs without a per-organization role to mint their storage access from, and a bad role or duration', () => {
    const k8s = { HANZO_ML_HOME: home(), HANZO_ML_SCHEDULER_EXECUTOR: 'kubernetes', HANZO_ML_STORAGE_ENDPOINT: 'http://127.0.0.1:9000' };
    expect(() => loadConfig(k8s)).toThrow(/storage\.job_access\.role_arn \(HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN\):.*organization's role/s);
    expect(() => loadConfig({ ...k8s, HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: 'arn:aws:iam::1:role/one-for-all' })).toThrow(/storage\.job_access\.role_arn.*containing \{organization\}/s);
    expect(() => loadConfig({ ...k8s, HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: ROLE, HANZO_ML_STORAGE_JOB_ACCESS_DURATION: '7d' })).toThrow(/storage\.job_access\.duration.*between 15m and 12h/s);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_STORAGE_JOB_ACCESS_ROLE_ARN: ROLE })).toThrow(/storage\.job_access\.role_arn.*without storage\.endpoint/s);
    expect(() => loadConfig({ ...k8s, HANZO_ML_SCHEDULER_STORAGE_SECRET: 'hanzo-ml-storage' })).toThrow(/HANZO_ML_SCHEDULER_STORAGE_SECRET: unknown configuration key/);
  });

  it('takes a reload hook only with its signing secret, and an http(s) URL', () => {
    const url = 'https://serving.internal/reload';
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: url })).toThrow(/promotion\.webhook_secret \(HANZO_ML_PROMOTION_WEBHOOK_SECRET\): required with promotion\.webhook_url/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'x'.repeat(32) })).toThrow(/set without promotion\.webhook_url/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: url, HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'short' })).toThrow(/promotion\.webhook_secret.*at least 16/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: 'ftp://serving/reload', HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'x'.repeat(32) })).toThrow(/promotion\.webhook_url.*http/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: url, HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'x'.repeat(32), HANZO_ML_PROMOTION_WEBHOOK_DEADLINE: 'soon' })).toThrow(/promotion\.webhook_deadline/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: url, HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'x'.repeat(32), HANZO_ML_PROMOTION_WEBHOOK_DEADLINE: '0s' })).toThrow(/promotion\.webhook_deadline.*longer than 0/);
    const { config } = loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_PROMOTION_WEBHOOK_URL: url, HANZO_ML_PROMOTION_WEBHOOK_SECRET: 'x'.repeat(32) });
    expect(config.promotion).toMatchObject({ webhook_url: url, webhook_deadline: '1h' });
    expect(loadConfig({ HANZO_ML_HOME: home() }).config.promotion.webhook_url).toBeUndefined();
  });

  it('takes storage.multipart_threshold in bytes within the part sizes S3 accepts (5 MiB to 5 GiB)', () => {
    expect(loadConfig({ HANZO_ML_HOME: home() }).config.storage.multipart_threshold).toBe(64 * 1024 * 1024);
    expect(loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_STORAGE_MULTIPART_THRESHOLD: '5242880' }).config.storage.multipart_threshold).toBe(5 * 1024 * 1024);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_STORAGE_MULTIPART_THRESHOLD: '1048576' })).toThrow(/storage\.multipart_threshold \(HANZO_ML_STORAGE_MULTIPART_THRESHOLD\): at least 5 MiB/);
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_STORAGE_MULTIPART_THRESHOLD: String(6 * 1024 ** 3) })).toThrow(/storage\.multipart_threshold.*at most 5 GiB/);
  });

  it('rejects an unknown environment key, naming it', () => {
    expect(() => loadConfig({ HANZO_ML_HOME: home(), HANZO_ML_SERVER_PROT: '1' })).toThrow(/HANZO_ML_SERVER_PROT: unknown configuration key/);
  });

  it('rejects an unknown or malformed YAML key, naming the key and its variable', () => {
    const h = home();
    writeFileSync(join(h, 'config.yaml'), 'server:\n  port: not-a-port\n');
    expect(() => loadConfig({ HANZO_ML_HOME: h })).toThrow(/server\.port \(HANZO_ML_SERVER_PORT\)/);
    writeFileSync(join(h, 'config.yaml'), 'servr:\n  port: 1\n');
    expect(() => loadConfig({ HANZO_ML_HOME: h })).toThrow(ConfigError);
    writeFileSync(join(h, 'config.yaml'), 'server: [1, 2\n');
    expect(() => loadConfig({ HANZO_ML_HOME: h })).toThrow(/not valid YAML/);
  });
});
