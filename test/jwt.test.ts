// IAM JWTs through the real authentication middleware and catalogue (PGlite), verified against a JWKS this test
// serves on loopback with keys it makes (an RSA and an EC key, as an IAM publishes them): what the verifier
// requires (exp, nbf within the skew, the audience, an allowed algorithm) and how an IAM organization becomes a
// tenant (only through auth.organizations).
import { createServer, type Server } from 'node:http';
import { Hono } from 'hono';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate, jwtVerifierFor, type JwtVerifier } from '../api/auth.js';
import type { AppEnv } from '../api/deps.js';
import { ApiError, ERROR_STATUS } from '../api/errors.js';
import { openCatalogue, type Catalogue } from '../db/client.js';
import { checkCombinations, loadConfig } from '../lib/config.js';
import { freePort } from './support/ports.js';

const AUDIENCE = 'hanzo-ml-api';
let jwks: Server;
let issuer: string;
let rsa: { privateKey: CryptoKey; publicKey: CryptoKey };
let ec: { privateKey: CryptoKey; publicKey: CryptoKey };
let cat: Catalogue;
let verify: JwtVerifier;
let app: Hono<AppEnv>;

const config = (env: Record<string, string> = {}) =>
  loadConfig({ HANZO_ML_HOME: '/tmp/unused', HANZO_ML_AUTH_IAM_URL: issuer, HANZO_ML_AUTH_AUDIENCE: AUDIENCE, HANZO_ML_AUTH_ORGANIZATIONS: 'iam-acme=acme,ops=dev', ...env }).config;

const now = () => Math.floor(Date.now() / 1000);

/** A token as IAM signs one (RS256, key "rsa-1"), with `claims` on top of a valid researcher of iam-acme. */
async function token(claims: JWTPayload = {}, o: { drop?: (keyof JWTPayload)[]; alg?: 'RS256' | 'ES256' } = {}): Promise<string> {
  const payload: JWTPayload = { iss: issuer, aud: AUDIENCE, sub: 'alice', org: 'iam-acme', roles: ['ml-researcher'], iat: now(), exp: now() + 600, ...claims };
  for (const k of o.drop ?? []) delete payload[k];
  const alg = o.alg ?? 'RS256';
  return new SignJWT(payload).setProtectedHeader({ alg, kid: alg === 'RS256' ? 'rsa-1' : 'ec-1' }).sign(alg === 'RS256' ? rsa.privateKey : ec.privateKey);
}

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

async function who(t: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await app.request('/who', { headers: { authorization: `Bearer ${t}` } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

beforeAll(async () => {
  rsa = await generateKeyPair('RS256', { extractable: true });
  ec = await generateKeyPair('ES256');
  const port = await freePort();
  issuer = `http://127.0.0.1:${port}/iam`;
  const keys = [
    { ...(await exportJWK(rsa.publicKey)), kid: 'rsa-1', alg: 'RS256', use: 'sig' },
    { ...(await exportJWK(ec.publicKey)), kid: 'ec-1', alg: 'ES256', use: 'sig' },
  ];
  jwks = createServer((req, res) => {
    if (req.url !== '/iam/.well-known/jwks') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys }));
  });
  await new Promise<void>((r) => jwks.listen(port, '127.0.0.1', () => r()));
  cat = await openCatalogue({});
  verify = jwtVerifierFor(config())!;
  app = new Hono<AppEnv>();
  app.onError((err, c) => c.json({ error_code: err instanceof ApiError ? err.code : 'INTERNAL_ERROR', message: err.message }, err instanceof ApiError ? ERROR_STATUS[err.code] : 500));
  app.use('*', authenticate(cat.db, { jwt: verify }));
  app.get('/who', (c) => c.json(c.get('principal')));
}, 60_000);

afterAll(async () => {
  await cat?.close();
  await new Promise((r) => jwks?.close(r));
});

describe('an IAM token', () => {
  it('signed with RS256 or ES256 by a published key, unexpired, for this audience, of a mapped organization is accepted', async () => {
    expect(await who(await token())).toEqual({ status: 200, body: { organizationId: 'acme', subject: 'alice', role: 'developer' } });
    expect((await who(await token({ roles: ['ml-admin'] }, { alg: 'ES256' }))).body).toMatchObject({ organizationId: 'acme', role: 'admin' });
  });

  it('without "exp" is refused with 401', async () => {
    const r = await who(await token({}, { drop: ['exp'] }));
    expect([r.status, r.body.message]).toEqual([401, expect.stringMatching(/no "exp"/)]);
  });

  it('not yet valid beyond the clock skew is refused, and one within it accepted', async () => {
    const early = await who(await token({ nbf: now() + 300 }));
    expect([early.status, early.body.message]).toEqual([401, expect.stringMatching(/not valid yet .*auth\.clock_skew 60s/)]);
    expect((await who(await token({ nbf: now() + 20 }))).status).toBe(200);
    // The skew is the setting's: with none, the same 20 seconds are refused.
    const strict = jwtVerifierFor(config({ HANZO_ML_AUTH_CLOCK_SKEW: '0s' }))!;
    await expect(strict(await token({ nbf: now() + 20 }))).rejects.toThrow(/not valid yet/);
    // exp is checked with the same tolerance: 20 s past is within it, 5 minutes past is expired.
    expect((await who(await token({ exp: now() - 20 }))).status).toBe(200);
    expect((await who(await token({ exp: now() - 300 }))).status).toBe(401);
  });

  it('for another audience, or for none, is refused with 401', async () => {
    const other = await who(await token({ aud: 'another-app' }));
    expect([other.status, other.body.message]).toEqual([401, expect.stringMatching(/audience is not "hanzo-ml-api"/)]);
    expect((await who(await token({}, { drop: ['aud'] }))).status).toBe(401);
  });

  it('with "alg: none" is refused with 401', async () => {
    const claims = { iss: issuer, aud: AUDIENCE, sub: 'mallory', org: 'iam-acme', roles: ['ml-admin'], exp: now() + 600 };
    // A signature segment that is not empty, so the middleware takes it for a JWT and the verifier sees it.
    const unsigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.AA`;
    const r = await who(unsigned);
    expect([r.status, r.body.message]).toEqual([401, expect.stringMatching(/algorithm "none" is not one of auth\.algorithms/)]);
    await expect(verify(`${b64({ alg: 'none' })}.${b64(claims)}.`)).rejects.toThrow(/IAM token rejected/);
  });

  it("signed HS256 with the bytes of the issuer's RS256 public key is refused with 401", async () => {
    const pem = await exportSPKI(rsa.publicKey);
    const claims = { iss: issuer, aud: AUDIENCE, sub: 'mallory', org: 'iam-acme', roles: ['ml-admin'], exp: now() + 600 };
    for (const key of [new TextEncoder().encode(pem), new TextEncoder().encode(JSON.stringify(await exportJWK(rsa.publicKey)))]) {
      const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: 'rsa-1' }).sign(key);
      const r = await who(forged);
      expect([r.status, r.body.message]).toEqual([401, expect.stringMatching(/algorithm "HS256" is not one of auth\.algorithms \(RS256, ES256, EdDSA\)/)]);
    }
  });

  it('refuses an algorithm list naming a shared-secret or no algorithm at start-up', () => {
    for (const alg of ['HS256', 'none']) expect(() => config({ HANZO_ML_AUTH_ALGORITHMS: `RS256,${alg}` })).toThrow(/auth\.algorithms\.1 .*asymmetric JWS algorithm/);
    expect(config({ HANZO_ML_AUTH_ALGORITHMS: 'ES256' }).auth.algorithms).toEqual(['ES256']);
  });

  it('is refused by an algorithm list without its algorithm', async () => {
    const onlyEc = jwtVerifierFor(config({ HANZO_ML_AUTH_ALGORITHMS: 'ES256' }))!;
    await expect(onlyEc(await token())).rejects.toThrow(/algorithm "RS256" is not one of auth\.algorithms \(ES256\)/);
    expect((await onlyEc(await token({}, { alg: 'ES256' }))).organizationId).toBe('acme');
  });
});

describe('the organization of an IAM token', () => {
  it('naming the operator organization is refused with 403 unless the operator mapped an IAM organization to it', async () => {
    for (const org of ['dev', 'acme', 'constructor', '__proto__']) {
      const r = await who(await token({ org, roles: ['ml-admin'] }));
      expect([org, r.status, r.body.message]).toEqual([org, 403, expect.stringMatching(/is not mapped to a tenant .*auth\.organizations/)]);
    }
    // The "owner" claim is read the same way.
    expect((await who(await token({ org: undefined, owner: 'dev', roles: ['ml-admin'] }))).status).toBe(403);
    // IAM organization "ops" is the operator's own, by the operator's mapping.
    expect((await who(await token({ org: 'ops', roles: ['ml-admin'] }))).body).toMatchObject({ organizationId: 'dev', role: 'admin' });
  });

  it('is refused when nothing is mapped, and a mapping to something that is no tenant id is refused at start-up', async () => {
    const none = jwtVerifierFor(config({ HANZO_ML_AUTH_ORGANIZATIONS: '' }))!;
    await expect(none(await token())).rejects.toThrow(/"iam-acme" is not mapped/);
    expect(() => config({ HANZO_ML_AUTH_ORGANIZATIONS: 'iam-acme=Not A Tenant' })).toThrow(/auth\.organizations\.iam-acme .*tenant id/);
    expect(() => config({ HANZO_ML_AUTH_ORGANIZATIONS: 'no-equals-sign' })).toThrow(/auth\.organizations .*mapping of IAM organization to tenant id/);
  });
});

describe('IAM settings that would do nothing, or too little', () => {
  it('are refused at start-up', () => {
    const plain = (env: Record<string, string>) => loadConfig({ HANZO_ML_HOME: '/tmp/unused', ...env }).config;
    expect(() => checkCombinations(plain({ HANZO_ML_AUTH_AUDIENCE: 'x' }))).toThrow(/auth\.audience .*without auth\.iam_url/);
    expect(() => checkCombinations(plain({ HANZO_ML_AUTH_ORGANIZATIONS: 'a=b' }))).toThrow(/auth\.organizations .*without auth\.iam_url/);
    // A server reachable from other machines must check the audience of IAM tokens.
    expect(() => checkCombinations(plain({ HANZO_ML_SERVER_HOST: '0.0.0.0', HANZO_ML_AUTH_ANONYMOUS_ROLE: 'none', HANZO_ML_AUTH_IAM_URL: issuer }))).toThrow(/auth\.audience .*required with auth\.iam_url on a server reachable/);
    expect(() => checkCombinations(config({ HANZO_ML_SERVER_HOST: '0.0.0.0' }))).not.toThrow();
    expect(() => config({ HANZO_ML_AUTH_CLOCK_SKEW: '10m' })).toThrow(/auth\.clock_skew .*at most 5m/);
  });
});
