'use strict';
// A store that names a policy (pklimit 0.4.0): the policy row in the
// database decides each hit, and a change to it applies to the next request.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore, pklimitTenant } = require('rate-limit-pklimit');
const { HOUR, pool, endPools, serve, sql, storedCount, unique, until, CountingStore } = require('./helpers');

after(endPools);

// A policy of max_count per hour, a fixed window starting at a key's first
// hit (no hour boundary resets a count mid-test); extra: more named arguments.
const setPolicy = (name, maxCount, extra = '') => sql('SELECT pklimit_policy_set($1::text, $2::bigint, \'1 hour\'' +
  `${/algorithm/.test(extra) ? '' : ", anchor => 'first'"}${extra})`, [name, maxCount]);
const count = async (key, policy) => Number((await sql('SELECT pklimit_count($1::text, $2::text) AS n', [key, policy]))[0].n);
const storedKey = (key, policy) => `p${Buffer.byteLength(policy)}:${policy}:g:${key}`;

// An app whose limiter's limit is the policy's; windowMs, a minute, is not
// the policy's hour and is never sent.
async function policyApp(policy, { store, limiter = {}, before } = {}) {
  const s = store ?? new PklimitStore({ pool: pool({ max: 1 }), policy });
  return serve({ store: s, before, limiter: { windowMs: 60000, limit: s.policyLimit, ...limiter } });
}

async function send(app, client, times, headers = {}) {
  const answers = [];
  for (let i = 0; i < times; i++) {
    const r = await app.get('/', { 'x-client': client, ...headers });
    await r.arrayBuffer();
    answers.push({ status: r.status, limit: r.headers.get('ratelimit-limit'),
      remaining: r.headers.get('ratelimit-remaining'), reset: Number(r.headers.get('ratelimit-reset')),
      retry: r.headers.get('retry-after') });
  }
  return answers;
}

test('within the policy\'s limit allowed, past it 429: its limit, remaining and reset in the headers', async () => {
  const policy = unique('api');
  await setPolicy(policy, 3);
  const app = await policyApp(policy);
  const client = unique('policy');
  const answers = await send(app, client, 5);
  assert.deepEqual(answers.map((a) => [a.status, a.limit, a.remaining]),
    [[200, '3', '2'], [200, '3', '1'], [200, '3', '0'], [429, '3', '0'], [429, '3', '0']]);
  for (const a of answers) assert.ok(a.reset > 3500 && a.reset <= 3600, `the policy's hour, not windowMs: ${a.reset}`);
  assert.ok(Number(answers[4].retry) > 3500, `Retry-After ${answers[4].retry}`);
  assert.equal((await sql('SELECT pklimit_stored_key($1::text, $2::text) AS k', [`rl:${client}`, policy]))[0].k,
    storedKey(`rl:${client}`, policy));
  assert.equal(await storedCount(storedKey(`rl:${client}`, policy)), 5, 'counted under the policy, refusals too');
  assert.deepEqual(await sql('SELECT max_count::int, window_end - window_start = interval \'1 hour\' AS hour' +
    ' FROM platformkit_limits WHERE key = $1',
    [storedKey(`rl:${client}`, policy)]), [{ max_count: 3, hour: true }]);
  await app.close();
});

test('a numeric limit: the headers show it, the remaining count is the policy\'s, and the policy refuses', async () => {
  const policy = unique('numeric');
  await setPolicy(policy, 2);
  const app = await policyApp(policy, { limiter: { limit: 1000 } });
  const answers = await send(app, unique('numeric'), 3);
  assert.deepEqual(answers.map((a) => [a.status, a.limit, a.remaining]), [[200, '1000', '1'], [200, '1000', '0'], [429, '1000', '0']]);
  await app.close();
});

test('a policy changed by the DBA applies to the next request, without restarting the app', async () => {
  const policy = unique('changed');
  await setPolicy(policy, 5);
  const app = await policyApp(policy);   // one connection: its cached policy must be dropped
  const client = unique('changed');
  const statusAndLimit = async () => (await send(app, client, 1)).map((a) => [a.status, a.limit, a.remaining])[0];
  assert.deepEqual(await statusAndLimit(), [200, '5', '4']);
  assert.deepEqual(await statusAndLimit(), [200, '5', '3']);
  await setPolicy(policy, 2);
  assert.deepEqual(await statusAndLimit(), [429, '2', '0'], 'lowered: 3 hits are over 2');
  await setPolicy(policy, 10);
  assert.deepEqual(await statusAndLimit(), [200, '10', '6'], 'raised: the refused hit counted too');
  await app.close();
});

test('a tenant\'s override of the policy decides its calls; the default row the others\'', async () => {
  const policy = unique('tenant');
  await setPolicy(policy, 3);
  await setPolicy(policy, 1, ", tenant => 'acme'");
  const app = await policyApp(policy, { before: [pklimitTenant((req) => req.get('x-tenant'))] });
  const client = unique('tenant');
  const got = async (tenant) => (await send(app, client, 2, tenant ? { 'x-tenant': tenant } : {}))
    .map((a) => `${a.status} ${a.limit}`);
  assert.deepEqual(await got('acme'), ['200 1', '429 1']);
  assert.deepEqual(await got('globex'), ['200 3', '200 3']);
  assert.deepEqual(await got(undefined), ['200 3', '200 3']);
  await app.close();
});

test('decrement, get and resetKey under the policy: pklimit_decrement, pklimit_check and pklimit_forget', async () => {
  const policy = unique('takeback');
  await setPolicy(policy, 3);
  const store = new CountingStore({ pool: pool(), policy });
  const app = await policyApp(policy, { store, limiter: { skipFailedRequests: true } });
  const client = unique('takeback');
  const key = `rl:${client}`;
  for (const path of ['/?fail=1', '/?fail=1', '/', '/', '/', '/']) {
    const r = await app.get(path, { 'x-client': client });
    await r.arrayBuffer();
  }
  // the two failures and the 429 taken back
  await until(() => store.decrements >= 3, '3 decrements');
  assert.equal(await count(key, policy), 3);
  const info = await app.limit.getKey(client);
  assert.equal(info.totalHits, 3);
  assert.ok(info.resetTime > Date.now() + HOUR - 60000, `get: the policy's window end, ${info.resetTime.toISOString()}`);
  await app.limit.resetKey(client);
  assert.equal(await storedCount(storedKey(key, policy)), null, 'resetKey forgot the key under the policy');
  assert.equal(await app.limit.getKey(client), undefined);
  assert.deepEqual((await send(app, client, 1)).map((a) => [a.status, a.remaining]), [[200, '2']]);
  await app.close();
});

test('a gcra policy with skipFailedRequests: its refusals are not taken back', async () => {
  const policy = unique('gcra');
  await setPolicy(policy, 1, ", algorithm => 'gcra'");
  const store = new CountingStore({ pool: pool(), policy });
  const app = await policyApp(policy, { store, limiter: { skipFailedRequests: true } });
  const client = unique('gcra-policy');
  const answers = await send(app, client, 4);
  assert.deepEqual(answers.map((a) => a.status), [200, 429, 429, 429]);
  await until(() => store.decrements >= 3, '3 decrements');
  assert.equal(await count(`rl:${client}`, policy), 1, 'the bucket stays full');
  await app.close();
});

test('a policy in shadow mode: refusals let through at the limit (RateLimit-Remaining 0), counted', async () => {
  const policy = unique('shadow');
  await setPolicy(policy, 1, ", mode => 'shadow'");
  const app = await policyApp(policy);
  const client = unique('shadow-policy');
  assert.deepEqual((await send(app, client, 3)).map((a) => [a.status, a.remaining]), [[200, '0'], [200, '0'], [200, '0']]);
  assert.equal(await count(`rl:${client}`, policy), 3);
  await app.close();
});

test('an unknown or dropped policy is an error (42704), never an allow', async () => {
  const policy = unique('dropped');
  await setPolicy(policy, 5);
  const app = await policyApp(policy);
  const client = unique('unknown');
  assert.equal((await send(app, client, 1))[0].status, 200);
  assert.deepEqual(await sql('SELECT pklimit_policy_drop($1::text) AS dropped', [policy]), [{ dropped: true }]);
  const r = await app.get('/', { 'x-client': client });
  assert.equal(r.status, 500);
  assert.match(await r.text(), new RegExp(`^error: policy "${policy}" does not exist$`));
  const store = new PklimitStore({ pool: pool(), policy: unique('never-made') });
  store.init({ windowMs: HOUR, limit: 5 });
  for (const call of ['increment', 'get', 'decrement', 'resetKey']) {
    await assert.rejects(store[call]('k'), (e) => e.code === '42704' && /policy ".*" does not exist/.test(e.message), call);
  }
  await app.close();
});

test('with policy: what the policy decides is refused as an option, and the name must be one pklimit takes', () => {
  for (const [name, value] of [['algorithm', 'gcra'], ['durable', true], ['anchor', 'first']]) {
    assert.throws(() => new PklimitStore({ pool: pool(), policy: 'api', [name]: value }),
      new RegExp(`${name} cannot be given with policy: the policy 'api' decides it; leave ${name} out`));
  }
  for (const policy of ['', 42, 'x'.repeat(64), 'é'.repeat(32)]) {
    assert.throws(() => new PklimitStore({ pool: pool(), policy }), /policy must be the name of a pklimit policy, a string of 1 to 63 bytes/);
  }
  assert.equal(new PklimitStore({ pool: pool(), policy: null }).policy, undefined, 'null: no policy, as schema');
  assert.throws(() => new PklimitStore({ pool: pool() }).policyLimit(), /policyLimit is the limit of a policy/);
});

test('every parameter is cast: no statement is ambiguous (42725) under 0.4.0\'s policy overloads', async () => {
  const stores = [{}, { anchor: 'epoch' }, { algorithm: 'gcra' }, { durable: false }, { policy: unique('cast') }];
  await setPolicy(stores[4].policy, 5);
  const key = unique('cast');
  for (const options of stores) {
    const store = new PklimitStore({ pool: pool(), ...options });
    for (const limit of [5, () => 5]) {
      store.init({ windowMs: HOUR, limit, skipFailedRequests: true });
      for (const text of Object.values(store.sql)) assert.doesNotMatch(text, /\$\d+(?!\d|::)/, text);
      await store.increment(key);
      await store.get(key);
      await store.decrement(key);
      await store.resetKey(key);
    }
  }
});
