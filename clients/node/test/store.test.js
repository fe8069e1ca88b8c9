'use strict';
// The store in express-rate-limit's real middleware, against a real pklimit.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { AsyncLocalStorage } = require('node:async_hooks');
const { PklimitStore, pklimitTenant, withTenant, NO_LIMIT } = require('rate-limit-pklimit');
const {
  HOUR, pool, endPools, serve, sql, storedCount, unique, statuses, until, CountingStore,
} = require('./helpers');

after(endPools);

test('two replicas share one exact limit: exactly N requests pass, the rest get 429', async () => {
  const a = await serve({ limiter: { limit: 10 } });
  const b = await serve({ limiter: { limit: 10 } });
  const client = unique('replicas');
  const got = await statuses(Array.from({ length: 40 }, (_, i) =>
    (i % 2 ? a : b).get('/', { 'x-client': client })));
  assert.deepEqual(got, { 200: 10, 429: 30 });
  assert.equal(await storedCount(`g:rl:${client}`), 40, 'every request counted, refused ones too');
  await a.close();
  await b.close();
});

test('RateLimit-* and Retry-After headers come from pklimit\'s reset time, an hour after the first hit', async () => {
  const client = unique('headers');
  const key = `g:rl:${client}`;
  for (const [draft, legacy] of [['draft-6', true], ['draft-7', false], ['draft-8', false]]) {
    const app = await serve({ limiter: { limit: 2, standardHeaders: draft, legacyHeaders: legacy } });
    const k = `${client}-${draft}`;
    const responses = [];
    for (let i = 0; i < 3; i++) {
      const before = Date.now();
      const r = await app.get('/', { 'x-client': k });
      responses.push({ r, before, after: Date.now(), body: await r.text() });
    }
    const [{ reset_at: resetAt }] = await sql(
      "SELECT reset_at FROM pklimit_check($1, 2, '3600000 milliseconds', cost => 0, anchor => 'first')", [`rl:${k}`]);
    assert.ok(resetAt >= responses[0].before + HOUR && resetAt <= responses[0].after + 1 + HOUR,
      `the window ends an hour after the first hit: ${resetAt.toISOString()}`);
    for (const [i, { r, before, after }] of responses.entries()) {
      const lo = Math.ceil((resetAt - after) / 1000);
      const hi = Math.ceil((resetAt - before) / 1000);
      const remaining = Math.max(2 - (i + 1), 0);
      let reset;
      if (draft === 'draft-6') {
        assert.equal(r.headers.get('ratelimit-limit'), '2');
        assert.equal(r.headers.get('ratelimit-remaining'), String(remaining));
        assert.equal(r.headers.get('ratelimit-policy'), '2;w=3600');
        reset = Number(r.headers.get('ratelimit-reset'));
        assert.equal(r.headers.get('x-ratelimit-reset'), String(Math.ceil(resetAt / 1000)),
          'X-RateLimit-Reset is the reset time itself');
        assert.equal(r.headers.get('x-ratelimit-remaining'), String(remaining));
      } else if (draft === 'draft-7') {
        const m = /^limit=2, remaining=(\d+), reset=(\d+)$/.exec(r.headers.get('ratelimit'));
        assert.ok(m, `draft-7 RateLimit header: ${r.headers.get('ratelimit')}`);
        assert.equal(Number(m[1]), remaining);
        reset = Number(m[2]);
      } else {
        const m = /^"2-in-1hr"; r=(\d+); t=(\d+)$/.exec(r.headers.get('ratelimit'));
        assert.ok(m, `draft-8 RateLimit header: ${r.headers.get('ratelimit')}`);
        assert.equal(Number(m[1]), remaining);
        reset = Number(m[2]);
        assert.match(r.headers.get('ratelimit-policy'), /^"2-in-1hr"; q=2; w=3600; pk=:[A-Za-z0-9+/=]+:$/);
      }
      assert.ok(reset >= lo && reset <= hi, `${draft} reset ${reset} is ${lo}..${hi} s to pklimit's reset_at`);
      if (i < 2) {
        assert.equal(r.status, 200);
        assert.equal(r.headers.get('retry-after'), null);
      } else {
        assert.equal(r.status, 429);
        const retry = Number(r.headers.get('retry-after'));
        assert.ok(retry >= lo && retry <= hi, `${draft} Retry-After ${retry} is ${lo}..${hi} s`);
      }
    }
    await app.close();
  }
  assert.equal(await storedCount(`${key}-draft-7`), 3);
});

test('counts survive an app restart (a new app instance, pool and store)', async () => {
  const client = unique('restart');
  let app = await serve({ limiter: { limit: 5 } });
  for (let i = 0; i < 3; i++) assert.equal((await app.get('/', { 'x-client': client })).status, 200);
  await app.close();
  app = await serve({ limiter: { limit: 5 } });
  const r4 = await app.get('/', { 'x-client': client });
  assert.equal(r4.status, 200);
  assert.equal(r4.headers.get('ratelimit-remaining'), '1', 'the 4th request of the window');
  assert.equal((await app.get('/', { 'x-client': client })).status, 200);
  assert.equal((await app.get('/', { 'x-client': client })).status, 429);
  await app.close();
});

test('a hit made inside the app\'s transaction stays counted after its ROLLBACK', async () => {
  const client = unique('rollback');
  const p = pool({ max: 2 });
  await sql('CREATE TABLE IF NOT EXISTS app_orders (client text)');
  // The store queries the request's own transaction client, from the
  // app's pool: BEGIN, the request is limited, ROLLBACK.
  const tx = new AsyncLocalStorage();
  const store = new PklimitStore({ pool: { query: (text, values) => tx.getStore().query(text, values) } });
  const begin = async (req, res, next) => {
    const c = await p.connect();
    await c.query('BEGIN');
    await c.query('INSERT INTO app_orders VALUES ($1)', [client]);
    res.on('finish', () => c.query('ROLLBACK').finally(() => c.release()));
    tx.run(c, next);
  };
  const app = await serve({ store, before: [begin], limiter: { limit: 2 } });
  const got = [];
  for (let i = 0; i < 3; i++) got.push((await app.get('/', { 'x-client': client })).status);
  assert.deepEqual(got, [200, 200, 429], 'the hits of rolled-back transactions count against the limit');
  await until(async () => (await p.query('SELECT 1')) && p.idleCount === p.totalCount, 'the transactions to end');
  assert.deepEqual(await sql('SELECT * FROM app_orders WHERE client = $1', [client]), [],
    'the app\'s transactions were rolled back');
  assert.equal(await storedCount(`g:rl:${client}`), 3, 'and all three hits stayed counted');
  await app.close();
});

for (const [option, taken] of [['skipFailedRequests', 20], ['skipSuccessfulRequests', 30]]) {
  test(`${option}: 50 concurrent requests, 20 failing, leave an exact count`, async () => {
    const client = unique(option);
    const store = new CountingStore({ pool: pool({ max: 8 }) });
    const app = await serve({ store, limiter: { limit: 1000, [option]: true } });
    const got = await statuses(Array.from({ length: 50 }, (_, i) =>
      app.get(i % 5 < 2 ? '/?fail=1' : '/', { 'x-client': client })));
    assert.deepEqual(got, { 200: 30, 500: 20 });
    await until(() => store.decrements >= taken, `${taken} decrements`);
    assert.equal(store.decrements, taken);
    assert.equal(await storedCount(`g:rl:${client}`), 50 - taken);
    const r = await app.get('/', { 'x-client': client });
    assert.equal(r.headers.get('ratelimit-remaining'), String(1000 - (50 - taken) - 1));
    await app.close();
  });
}

test('a decrement never goes below zero and never creates a row', async () => {
  const client = unique('decrement');
  const store = new PklimitStore({ pool: pool() });
  store.init({ windowMs: HOUR, limit: 1 });
  await store.decrement(client);
  assert.equal(await storedCount(`g:rl:${client}`), null, 'no row created');
  assert.deepEqual((await store.increment(client)).totalHits, 1);
  await store.decrement(client);
  await store.decrement(client);
  assert.equal(await storedCount(`g:rl:${client}`), 0, 'never below zero');
});

test('resetKey forgets the key (pklimit_forget); get peeks without recording', async () => {
  const client = unique('reset');
  const app = await serve({ limiter: { limit: 3 } });
  assert.equal(await app.limit.getKey(client), undefined, 'get: undefined for a key with no hits');
  assert.equal(await storedCount(`g:rl:${client}`), null, 'get creates no row');
  const first = Date.now();
  for (let i = 0; i < 3; i++) await app.get('/', { 'x-client': client });
  const third = Date.now();
  assert.equal((await app.get('/', { 'x-client': client })).status, 429);
  const info = await app.limit.getKey(client);
  assert.equal(info.totalHits, 4);
  assert.ok(info.resetTime >= first + HOUR && info.resetTime <= third + 1 + HOUR,
    `get: the reset time, an hour after the first hit: ${info.resetTime.toISOString()}`);
  assert.equal((await app.limit.getKey(client)).totalHits, 4, 'get records nothing');
  await app.limit.resetKey(client);
  assert.equal(await storedCount(`g:rl:${client}`), null, 'resetKey deletes the count');
  assert.equal(await app.limit.getKey(client), undefined);
  const r = await app.get('/', { 'x-client': client });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('ratelimit-remaining'), '2', 'a fresh count after resetKey');
  await app.limit.resetKey(unique('never-seen'));
  await app.close();
});

test('tenants never meet: one key, three tenants, three counts', async () => {
  const client = unique('tenants');
  const p = pool({ max: 4 });
  const tenant = pklimitTenant((req) => req.get('x-tenant'));
  const app = await serve({ store: new PklimitStore({ pool: p }), before: [tenant], limiter: { limit: 3 } });
  const send = (t, path = '/') => app.get(path, t ? { 'x-client': client, 'x-tenant': t } : { 'x-client': client });
  const got = await statuses([...Array(5)].flatMap(() => [send('acme'), send('globex'), send(undefined)]));
  assert.deepEqual(got, { 200: 9, 429: 6 }, 'each tenant its own limit of 3');
  assert.deepEqual(await sql(
    "SELECT key, count::int FROM platformkit_limits WHERE key LIKE '%' || $1 ORDER BY key COLLATE \"C\"", [client]),
  [{ key: `g:rl:${client}`, count: 5 }, { key: `t4:acme:rl:${client}`, count: 5 },
    { key: `t6:globex:rl:${client}`, count: 5 }]);
  // the decrement of a failed request lands in its own tenant
  const skip = await serve({
    store: new CountingStore({ pool: p }), before: [tenant],
    limiter: { limit: 3, skipFailedRequests: true, keyGenerator: (req) => `skip-${req.get('x-client')}` },
  });
  await skip.get('/', { 'x-client': client, 'x-tenant': 'acme' });
  await skip.get('/?fail=1', { 'x-client': client, 'x-tenant': 'acme' });
  await skip.get('/', { 'x-client': client, 'x-tenant': 'globex' });
  await until(async () => (await storedCount(`t4:acme:rl:skip-${client}`)) === 1, 'the acme decrement');
  assert.equal(await storedCount(`t6:globex:rl:skip-${client}`), 1);
  await app.close();
  await skip.close();
});

test('no tenant leaks to the next call on the same pooled connection', async () => {
  const client = unique('leak');
  const p = pool({ max: 1 });
  const tenant = pklimitTenant((req) => req.get('x-tenant'));
  const app = await serve({ store: new PklimitStore({ pool: p }), before: [tenant], limiter: { limit: 3 } });
  const pid = (await p.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  await app.get('/', { 'x-client': client, 'x-tenant': 'acme' });
  assert.equal((await p.query("SELECT current_setting('platformkit.tenant', true) AS t")).rows[0].t, '',
    'the tenant ended with its statement');
  await app.get('/', { 'x-client': client });
  // a session-level SET left on the connection by someone else is overridden
  await p.query("SET platformkit.tenant = 'x'");
  await app.get('/', { 'x-client': client });
  await app.get('/', { 'x-client': client, 'x-tenant': 'acme' });
  assert.equal((await p.query('SELECT pg_backend_pid() AS pid')).rows[0].pid, pid, 'one server connection throughout');
  await p.query('RESET platformkit.tenant');
  assert.deepEqual(await sql(
    "SELECT key, count::int FROM platformkit_limits WHERE key LIKE '%' || $1 ORDER BY key COLLATE \"C\"", [client]),
  [{ key: `g:rl:${client}`, count: 2 }, { key: `t4:acme:rl:${client}`, count: 2 }]);
  await app.close();
});

test('a limit function: max_count is the largest bigint, the middleware decides, algorithm ignored', async () => {
  const client = unique('limitfn');
  const app = await serve({
    store: new PklimitStore({ pool: pool(), algorithm: 'gcra' }),
    limiter: { limit: (req) => 2 },
  });
  const got = [];
  for (let i = 0; i < 4; i++) got.push((await app.get('/', { 'x-client': client })).status);
  assert.deepEqual(got, [200, 200, 429, 429]);
  assert.deepEqual(await sql('SELECT count::int, algorithm, max_count::text FROM platformkit_limits WHERE key = $1',
    [`g:rl:${client}`]), [{ count: 4, algorithm: 'fixed', max_count: NO_LIMIT }]);
  await app.close();
});

test('algorithm gcra with a numeric limit: pklimit decides', async () => {
  const client = unique('gcra');
  const app = await serve({ store: new PklimitStore({ pool: pool(), algorithm: 'gcra' }), limiter: { limit: 3 } });
  const got = [];
  for (let i = 0; i < 5; i++) got.push((await app.get('/', { 'x-client': client })).status);
  assert.deepEqual(got, [200, 200, 200, 429, 429]);
  // a refusal's Retry-After is when one more fits (a step of 20 minutes),
  // not when the bucket is empty (an hour)
  const retry = Number((await app.get('/', { 'x-client': client })).headers.get('retry-after'));
  assert.ok(retry > 1100 && retry <= 1200, `Retry-After ${retry}`);
  assert.deepEqual(await sql('SELECT algorithm, max_count::int FROM platformkit_limits WHERE key = $1',
    [`g:rl:${client}`]), [{ algorithm: 'gcra', max_count: 3 }]);
  await app.close();
});

test('gcra with skipFailedRequests: a client that keeps retrying past the limit gets no more in', async () => {
  const client = unique('gcra-skip');
  const app = await serve({
    store: new PklimitStore({ pool: pool(), algorithm: 'gcra' }),
    limiter: { limit: 3, skipFailedRequests: true },
  });
  const got = [];
  for (let i = 0; i < 20; i++) {
    got.push((await app.get('/', { 'x-client': client })).status);
  }
  assert.deepEqual(got, [200, 200, 200, ...Array(17).fill(429)]);
  // the refusals, capped at a full bucket, were not taken back: it is full
  assert.deepEqual(await sql('SELECT pklimit_count($1)::int AS n', [`rl:${client}`]), [{ n: 3 }]);
  await app.close();
});

test('gcra with skipFailedRequests: a refusal\'s decrement takes nothing, another request\'s takes its own hit', async () => {
  const client = unique('gcra-tenants');
  const store = new PklimitStore({ pool: pool(), algorithm: 'gcra' });
  store.init({ windowMs: HOUR, limit: 1, skipFailedRequests: true });
  // a request is one async context, as the middleware's: its increment,
  // then its decrement once its response is known
  const request = (tenant, responded) => withTenant(tenant, async () => {
    const { totalHits } = await store.increment(client);
    await responded;
    await store.decrement(client);
    return totalHits;
  });
  assert.equal((await withTenant('acme', () => store.increment(client))).totalHits, 1, 'acme\'s bucket full');
  // acme refused; before its decrement, a globex request counted and taken back
  let respond;
  const acme = request('acme', new Promise((resolve) => { respond = resolve; }));
  assert.equal(await request('globex'), 1);
  assert.equal(await storedCount(`t6:globex:rl:${client}`), 0, 'globex\'s hit was taken back');
  respond();
  assert.equal(await acme, 2, 'acme refused');
  assert.equal((await withTenant('acme', () => store.increment(client))).totalHits, 2, 'acme stays refused');
});

test('shadow mode: refusals are allowed, counted exactly, with RateLimit-Remaining 0', async () => {
  const client = unique('shadow');
  const app = await serve({
    store: new PklimitStore({ pool: pool({ options: '-c pklimit.shadow_mode=on' }) }),
    limiter: { limit: 2 },
  });
  const rs = [];
  for (let i = 0; i < 4; i++) rs.push(await app.get('/', { 'x-client': client }));
  assert.deepEqual(rs.map((r) => r.status), [200, 200, 200, 200]);
  assert.deepEqual(rs.map((r) => r.headers.get('ratelimit-remaining')), ['1', '0', '0', '0']);
  assert.equal(await storedCount(`g:rl:${client}`), 4);
  await app.close();
});

test('schema: pklimit installed in another schema, off the search_path', async () => {
  const client = unique('schema');
  const p = pool({ database: process.env.PKLIMIT_SCHEMA_DB });
  const app = await serve({ store: new PklimitStore({ pool: p, schema: 'Rate Limits', prefix: 'other:' }), limiter: { limit: 1 } });
  assert.deepEqual([(await app.get('/', { 'x-client': client })).status, (await app.get('/', { 'x-client': client })).status],
    [200, 429]);
  assert.deepEqual((await p.query('SELECT key, count::int FROM "Rate Limits".platformkit_limits WHERE key = $1',
    [`g:other:${client}`])).rows, [{ key: `g:other:${client}`, count: 2 }]);
  await app.close();
});

test('prefixes never share a count: a separator between prefix and key', async () => {
  const client = unique('prefix');
  const api = new PklimitStore({ pool: pool(), prefix: 'api' });
  const apix = new PklimitStore({ pool: pool(), prefix: 'apix:' });
  for (const store of [api, apix]) store.init({ windowMs: HOUR, limit: 5 });
  assert.equal((await api.increment(`x:${client}`)).totalHits, 1);
  assert.equal((await apix.increment(`:${client}`)).totalHits, 1, 'apix\'s key is not api\'s');
  assert.deepEqual(await sql(
    "SELECT key, count::int FROM platformkit_limits WHERE key LIKE '%' || $1 ORDER BY key COLLATE \"C\"", [`:${client}`]),
  [{ key: `g:api:x:${client}`, count: 1 }, { key: `g:apix::${client}`, count: 1 }]);
  assert.equal(api.prefix, 'api:');
  assert.equal(new PklimitStore({ pool: pool() }).prefix, 'rl:', 'the default stays rl:');
});

test('bad options are refused', () => {
  assert.throws(() => new PklimitStore({}), /pool must be a pg.Pool/);
  assert.throws(() => new PklimitStore({ pool: pool(), algorithm: 'leaky' }), /algorithm must be one of fixed, gcra, sliding/);
  assert.throws(() => new PklimitStore({ pool: pool(), anchor: 'midnight' }), /anchor must be one of first, epoch/);
  for (const [prefix, hint] of [['rl:login:', 'rl-login:'], ['', 'rl:'], [':', 'rl:'], ['a::', 'a-:']]) {
    assert.throws(() => new PklimitStore({ pool: pool(), prefix }),
      new RegExp(`prefix must be a name without ':' .*got '${prefix}'; try '${hint}'`), prefix);
  }
  assert.throws(() => pklimitTenant('x-tenant'), /getTenant must be a function/);
  // an option it does not know, mis-cased or not, instead of being ignored
  assert.throws(() => new PklimitStore({ pool: pool(), Durable: false }),
    /unknown option Durable \(names are case-sensitive: did you mean durable\?\)/);
  assert.throws(() => new PklimitStore({ pool: pool(), windowMs: 1000 }), /unknown option windowMs; the options are pool,/);
});
