'use strict';
// concurrencyLimit (pklimit 0.4.0's leases) in real Express apps: at most
// max handlers run at once per key, from two app instances and under many
// requests retried at once; a refusal is 429 with Retry-After, its message
// or handler the app's; each lease is released once, when the response
// finishes, when the client goes away (mid-request, or while the acquire is
// under way) and when the handler throws; a long response keeps its lease by
// renewing it, and no timer outlives its response; a token that is no lease
// (shadow mode, the store unavailable) lets the request run and is not
// renewed.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { concurrencyLimit } = require('rate-limit-pklimit');
const { pool, endPools, sql, unique, until } = require('./helpers');

after(endPools);

const apps = [];
after(() => { for (const a of apps.splice(0)) { a.server.closeAllConnections(); a.server.close(); } });

// the live leases on key, of tenant (none by default)
const held = async (key, tenant = '') => Number((await sql(
  "SELECT count(*) AS n FROM (SELECT pg_catalog.set_config('platformkit.tenant', $2::text, true) AS tenant," +
  ' $1::text AS key OFFSET 0) t, LATERAL pklimit_leases(t.key) l', [key, tenant]))[0].n);
const tokens = async (key) => (await sql('SELECT token FROM pklimit_leases($1::text)', [key])).map((r) => r.token);

// An app whose route runs behind limiter (one middleware, or a list of
// them); route(req, res, next) answers.
async function serve(limiter, route) {
  const app = express();
  app.get('/', ...[limiter].flat(), route);
  app.use((error, req, res, next) => { res.status(500).send(`error: ${error.message}`); });
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const a = { server, url };
  apps.push(a);
  return a;
}

// A route that holds its request until open() is called, counting the
// handlers running at once.
function gate() {
  const g = { running: 0, most: 0, started: 0, opened: false, waiters: [] };
  g.route = async (req, res) => {
    g.running++;
    g.started++;
    g.most = Math.max(g.most, g.running);
    if (!g.opened) await new Promise((resolve) => g.waiters.push(resolve));
    g.running--;
    res.send(`ok ${req.pklimitLease.status}`);
  };
  g.open = () => { g.opened = true; for (const w of g.waiters.splice(0)) w(); };
  return g;
}

// A pool that notes the lease statements it is given, in order: what
// (acquire_check, renew or release), the token, and once answered the
// answer's row.  While hold is a promise, acquires wait for it first.
function noting(p = pool()) {
  const n = { calls: [], hold: undefined };
  n.query = async (text, params) => {
    const what = /pklimit_(acquire_check|renew|release)\(/.exec(text)?.[1];
    const call = { what, token: what === 'acquire_check' ? undefined : params[2], answer: undefined };
    if (what) n.calls.push(call);
    if (what === 'acquire_check' && n.hold) await n.hold;
    const result = await p.query(text, params);
    call.answer = result.rows[0];
    return result;
  };
  n.of = (what, token) => n.calls.filter((c) => c.what === what && (token === undefined || c.token === token));
  n.granted = () => n.of('acquire_check').filter((c) => c.answer?.token).map((c) => c.answer.token);
  return n;
}

// Returns once a lease of another key, renewed every `every` ms by another
// concurrencyLimit, has been renewed three times: by then a renewal timer of
// the same period started before this call would have fired three times too.
let controls = 0;
async function threeRenewalsElsewhere(every) {
  const n = noting();
  const g = gate();
  const a = await serve(concurrencyLimit({ pool: n, key: unique(`control-${++controls}`), max: 1, lease: 60000,
    renewEvery: every }), g.route);
  const r = fetch(a.url);
  await until(async () => n.of('renew').filter((c) => c.answer?.renewed === true).length >= 3,
    'three renewals of another lease');
  g.open();
  await (await r).arrayBuffer();
}

test('at most max at once from two app instances; the rest 429 with Retry-After; each lease freed once', async () => {
  const key = unique('exports');
  const g = gate();
  const options = { key, max: 2, lease: 60000 };
  const pools = [noting(), noting()];
  let closed = 0;
  // after the limiter's own: by then the limiter has seen finish and close
  const route = (req, res) => { res.on('close', () => { closed++; }); return g.route(req, res); };
  const a = await serve(concurrencyLimit({ pool: pools[0], ...options }), route);
  const b = await serve(concurrencyLimit({ pool: pools[1], ...options }), route);
  let answered = 0;
  const requests = [];
  for (let i = 0; i < 8; i++) {
    requests.push(fetch(i % 2 ? a.url : b.url).then(async (r) => {
      const body = await r.text();
      answered++;
      return { status: r.status, retry: r.headers.get('retry-after'), body };
    }));
  }
  // the six refusals answer while two handlers hold their leases
  await until(async () => g.started === 2 && answered === 6, 'two handlers running, six refused');
  assert.equal(await held(key), 2, 'two leases held');
  g.open();
  const refused = [];
  const granted = [];
  for (const r of await Promise.all(requests)) {
    (r.status === 429 ? refused : granted).push(r);
    if (r.status === 429) assert.ok(Number(r.retry) >= 1, `Retry-After ${r.retry}`);
  }
  assert.equal(granted.length, 2, 'two granted');
  assert.equal(refused.length, 6, 'six refused');
  assert.equal(g.most, 2, 'never more than two handlers at once');
  await until(async () => (await held(key)) === 0, 'the leases released once the responses finished');
  await until(async () => closed === 2, 'both responses closed after they finished');
  for (const n of pools) {
    for (const token of n.granted()) {
      assert.deepEqual(n.of('release', token).map((c) => c.answer?.released), [true], `${token} released once`);
    }
    assert.equal(n.of('release').length, n.granted().length, 'no refusal released anything');
  }
});

test('many requests at once, each retried until it runs: never more than max handlers at once', async () => {
  const key = unique('churn');
  const options = { key, max: 3, lease: 60000 };
  const work = pool({ max: 8 });
  let running = 0;
  let most = 0;
  const route = async (req, res) => {
    running++;
    most = Math.max(most, running);
    try {
      await work.query('SELECT pg_sleep(0.005)');
    } finally {
      running--;
    }
    res.send('done');
  };
  const a = await serve(concurrencyLimit({ pool: pool({ max: 8 }), ...options }), route);
  const b = await serve(concurrencyLimit({ pool: pool({ max: 8 }), ...options }), route);
  let refusals = 0;
  const client = async (i) => {
    for (;;) {
      const r = await fetch(i % 2 ? a.url : b.url);
      await r.arrayBuffer();
      if (r.status === 200) return;
      assert.equal(r.status, 429);
      refusals++;
      // a client's pause between tries (Retry-After is a whole second)
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  await Promise.all(Array.from({ length: 30 }, (_, i) => client(i)));
  assert.ok(most <= 3, `at most three handlers at once, saw ${most}`);
  assert.equal(most, 3, 'the bound was reached');
  assert.ok(refusals > 0, 'some requests were refused and retried');
  await until(async () => (await held(key)) === 0, 'every lease released');
});

test('a client that disconnects mid-request frees its lease', async () => {
  const key = unique('disconnect');
  let closed = false;
  const a = await serve(concurrencyLimit({ pool: pool(), key, max: 1, lease: 60000 }), (req, res) => {
    res.on('close', () => { closed = true; });  // never answers
  });
  const abort = new AbortController();
  const pending = fetch(a.url, { signal: abort.signal }).catch((error) => error);
  await until(async () => (await held(key)) === 1, 'the lease taken');
  const second = await fetch(a.url);
  assert.equal(second.status, 429, 'the slot is taken while the first request runs');
  await second.arrayBuffer();
  abort.abort();
  await pending;
  await until(async () => closed, 'the connection closed');
  await until(async () => (await held(key)) === 0, 'the lease released when the client went away');
});

test('a client gone while its acquire is under way: its lease is released as it comes; no handler runs', async () => {
  const key = unique('gone-early');
  const n = noting();
  let letGo;
  n.hold = new Promise((resolve) => { letGo = resolve; });
  let closed = false;
  let ran = false;
  const seeClose = (req, res, next) => { res.on('close', () => { closed = true; }); next(); };
  const a = await serve([seeClose, concurrencyLimit({ pool: n, key, max: 1, lease: 60000, renewEvery: 20 })],
    (req, res) => { ran = true; res.send('ran'); });
  const abort = new AbortController();
  const pending = fetch(a.url, { signal: abort.signal }).catch((error) => error);
  await until(async () => n.of('acquire_check').length === 1, 'the acquire under way');
  abort.abort();
  await pending;
  await until(async () => closed, 'the connection closed');
  letGo();
  await until(async () => n.of('release')[0]?.answer !== undefined, 'a release answered');
  const [token] = n.granted();
  assert.ok(token, 'the acquire was granted');
  assert.deepEqual(n.of('release').map((c) => [c.token, c.answer.released]), [[token, true]], 'and released at once');
  assert.equal(await held(key), 0);
  assert.equal(ran, false, 'the handler did not run');
  await threeRenewalsElsewhere(20);
  assert.equal(n.of('renew').length, 0, 'no renewal timer was left running');
});

for (const [how, route] of [
  ['throws', () => { throw new Error('export failed'); }],
  ['rejects', async () => { await null; throw new Error('export failed'); }],
]) {
  test(`a handler that ${how} frees its lease, and the error reaches the error handler`, async () => {
    const key = unique(`handler-${how}`);
    const a = await serve(concurrencyLimit({ pool: pool(), key, max: 1, lease: 60000 }), route);
    const r = await fetch(a.url);
    assert.equal(r.status, 500);
    assert.equal(await r.text(), 'error: export failed');
    await until(async () => (await held(key)) === 0, 'the lease released after the error');
    const again = await fetch(a.url);
    assert.equal(again.status, 500, 'the next request gets the slot (and fails the same way)');
    await again.arrayBuffer();
    await until(async () => (await held(key)) === 0, 'released again');
  });
}

test('a long response renews its lease, which outlives its first length; renewals stop with it', async () => {
  const key = unique('renew');
  const g = gate();
  const n = noting();
  const a = await serve(concurrencyLimit({ pool: n, key, max: 1, lease: 1000, renewEvery: 200 }), g.route);
  const first = fetch(a.url);
  await until(async () => g.started === 1, 'the handler running');
  const [{ at }] = await sql('SELECT acquired_at::text AS at FROM pklimit_leases($1::text)', [key]);
  await until(async () => (await sql('SELECT clock_timestamp() > $1::timestamptz + interval \'1500 milliseconds\' AS past',
    [at]))[0].past, 'past the first length and then some');
  assert.equal(await held(key), 1, 'still held, renewed');
  const second = await fetch(a.url);
  assert.equal(second.status, 429, 'and still counted');
  await second.arrayBuffer();
  g.open();
  assert.equal((await first).status, 200);
  await until(async () => (await held(key)) === 0, 'released at the end');
  await until(async () => n.of('release')[0]?.answer !== undefined, 'the release answered');
  const renewals = n.of('renew').length;
  assert.ok(renewals >= 2, `renewed as it ran (${renewals} times)`);
  await threeRenewalsElsewhere(200);
  assert.equal(n.of('renew').length, renewals, 'no renewal after the response');
});

test('shadow mode: a token that is no lease lets the request through, and is not renewed', async () => {
  const key = unique('shadow');
  const g = gate();
  const n = noting(pool({ options: '-c pklimit.shadow_mode=on' }));
  const a = await serve(concurrencyLimit({ pool: n, key, max: 0, lease: 60000, renewEvery: 20 }), g.route);
  const r = fetch(a.url);
  await until(async () => g.started === 1, 'the handler running');
  await threeRenewalsElsewhere(20);
  g.open();
  const res = await r;
  assert.equal(res.status, 200);
  assert.equal(await res.text(), 'ok shadow');
  await until(async () => n.of('release')[0]?.answer !== undefined, 'its release answered');
  assert.equal(n.of('renew').length, 0, 'never renewed');
  assert.deepEqual(n.of('release').map((c) => c.answer.released), [false], 'its release frees nothing');
  assert.equal(await held(key), 0, 'nothing held');
});

test('the store unavailable under allow: a full key lets the request run on a token that is no lease', async () => {
  const key = unique('fail-open');
  // one lease on the key, then its row locked for longer than
  // pklimit.timeout: pklimit answers lock_timeout (as a busy store would)
  const [{ first }] = await sql("SELECT pklimit_acquire($1::text, 1, '10 minutes') AS first", [key]);
  const locker = await pool({ max: 1 }).connect();
  const warnings = [];
  const n = noting(pool({ options: '-c pklimit.timeout=200ms -c pklimit.on_unavailable=allow' }));
  const g = gate();
  let body;
  try {
    await locker.query('BEGIN');
    const { rows } = await locker.query('SELECT 1 FROM platformkit_leases WHERE $1::uuid = ANY (tokens) FOR UPDATE',
      [first]);
    assert.equal(rows.length, 1, 'the row locked');
    const a = await serve(concurrencyLimit({ pool: n, key, max: 1, lease: 60000, renewEvery: 20,
      logger: (m) => warnings.push(m) }), g.route);
    const r = fetch(a.url);
    await until(async () => g.started === 1, 'the handler running, the key full');
    await threeRenewalsElsewhere(20);
    g.open();
    const res = await r;
    assert.equal(res.status, 200);
    body = await res.text();
    await until(async () => n.of('release')[0]?.answer !== undefined, 'its release answered');
  } finally {
    await locker.query('ROLLBACK');
    locker.release();
  }
  const [{ token }] = n.of('acquire_check').map((c) => c.answer);
  assert.ok(token, 'a token, that is no lease');
  assert.match(body, /^ok (lock_timeout|timeout)$/);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /store unavailable \((lock_timeout|timeout)\) for the lease on '.*': .*answered allow/);
  assert.equal(n.of('renew').length, 0, 'never renewed');
  assert.deepEqual(n.of('release').map((c) => [c.token, c.answer.released]), [[token, null]],
    'released once, the store still unavailable');
  assert.deepEqual(await tokens(key), [first], 'the lease taken before is the only one');
  await sql('SELECT pklimit_release($1::text, $2::uuid)', [key, first]);
});

test('a refusal: the message may be a function, a handler answers instead; Retry-After either way', async () => {
  const key = unique('refusal');
  const [{ first }] = await sql("SELECT pklimit_acquire($1::text, 1, '10 minutes') AS first", [key]);
  const options = { key, max: 1, lease: 60000 };
  const a = await serve(concurrencyLimit({ pool: pool(), ...options, statusCode: 503,
    message: async (req) => ({ busy: req.path }) }), (req, res) => res.send('ran'));
  const r = await fetch(a.url);
  assert.equal(r.status, 503);
  assert.deepEqual(await r.json(), { busy: '/' });
  const retry = Number(r.headers.get('retry-after'));
  assert.ok(retry >= 590 && retry <= 600, `Retry-After: the seconds until the lease ends, ${retry}`);
  const b = await serve(concurrencyLimit({ pool: pool(), ...options,
    handler: (req, res, next, used) => res.status(429).json({ retry: res.get('Retry-After'), max: used.max,
      lease: req.pklimitLease }) }), (req, res) => res.send('ran'));
  const h = await fetch(b.url);
  assert.equal(h.status, 429);
  const answer = await h.json();
  assert.equal(answer.retry, h.headers.get('retry-after'));
  assert.deepEqual(answer.lease, { token: null, held: 1, max: 1, status: 'ok' });
  assert.equal(answer.max, 1);
  // max 0 refuses all, and no lease will end to free a slot: no Retry-After
  const c = await serve(concurrencyLimit({ pool: pool(), key: unique('none'), max: 0, lease: 60000 }),
    (req, res) => res.send('ran'));
  const none = await fetch(c.url);
  assert.equal(none.status, 429);
  assert.equal(none.headers.get('retry-after'), null);
  assert.equal(await none.text(), 'Too many requests at once, please try again later.');
  assert.deepEqual(await tokens(key), [first], 'nothing else held');
  await sql('SELECT pklimit_release($1::text, $2::uuid)', [key, first]);
});

test('a policy gives max and lease; a tenant its own override', async () => {
  const policy = unique('exports-policy');
  await sql("SELECT pklimit_policy_set($1::text, 1, '10 minutes')", [policy]);
  await sql("SELECT pklimit_policy_set($1::text, 2, '10 minutes', tenant => 'bigco')", [policy]);
  const key = unique('policy');
  const g = gate();
  const a = await serve(concurrencyLimit({ pool: pool(), key, policy, tenant: (req) => req.get('x-tenant') }), g.route);
  const requests = [fetch(a.url), fetch(a.url), fetch(a.url, { headers: { 'x-tenant': 'bigco' } }),
    fetch(a.url, { headers: { 'x-tenant': 'bigco' } }), fetch(a.url, { headers: { 'x-tenant': 'bigco' } })];
  await until(async () => g.started === 3, 'one default and two bigco handlers running');
  g.open();
  const statuses = [];
  for (const r of await Promise.all(requests)) { statuses.push(r.status); await r.arrayBuffer(); }
  assert.deepEqual(statuses.sort(), [200, 200, 200, 429, 429]);
  // released after each response finished, each in its tenant
  await until(async () => (await held(key)) === 0 && (await held(key, 'bigco')) === 0, 'the leases released');
});

test('options are checked when the middleware is made', () => {
  const p = pool();
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 2 }), /lease must be/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 1001, lease: 1000 }), /max must be an integer from 0 to 1000/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', policy: 'p', max: 1 }), /policy '\w+' decides/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 1, lease: 1000, Max: 2 }), /unknown option Max/);
  assert.throws(() => concurrencyLimit({ key: 'k', max: 1, lease: 1000 }), /pool must be/);
});
