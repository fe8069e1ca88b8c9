'use strict';
// concurrencyLimit (pklimit 0.4.0's leases) in real Express apps: at most
// max handlers run at once per key, from two app instances; a refusal is 429
// with Retry-After; the lease is released when the response finishes, when
// the client goes away mid-request and when the handler throws; a long
// response keeps its lease by renewing it; a token that is no lease is not
// renewed.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { concurrencyLimit } = require('rate-limit-pklimit');
const { pool, endPools, sql, unique, until } = require('./helpers');

after(endPools);

const apps = [];
after(() => { for (const a of apps.splice(0)) { a.server.closeAllConnections(); a.server.close(); } });

const held = async (key) => Number((await sql('SELECT count(*) AS n FROM pklimit_leases($1::text)', [key]))[0].n);

// An app whose route runs behind limiter; route(req, res, next) answers.
async function serve(limiter, route) {
  const app = express();
  app.get('/', limiter, route);
  app.use((error, req, res, next) => { res.status(500).send(`error: ${error.message}`); });
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const url = `http://127.0.0.1:${server.address().port}/`;
  const a = { server, url };
  apps.push(a);
  return a;
}

// A route that holds its request until release() is called, counting the
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

test('at most max handlers at once from two app instances; the rest 429 with Retry-After; all released', async () => {
  const key = unique('exports');
  const g = gate();
  const options = { key, max: 2, lease: 60000 };
  const a = await serve(concurrencyLimit({ pool: pool(), ...options }), g.route);
  const b = await serve(concurrencyLimit({ pool: pool(), ...options }), g.route);
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

test('a handler that throws frees its lease, and the error reaches the error handler', async () => {
  const key = unique('throws');
  const a = await serve(concurrencyLimit({ pool: pool(), key, max: 1, lease: 60000 }), () => {
    throw new Error('export failed');
  });
  const r = await fetch(a.url);
  assert.equal(r.status, 500);
  assert.equal(await r.text(), 'error: export failed');
  await until(async () => (await held(key)) === 0, 'the lease released after the error');
  const again = await fetch(a.url);
  assert.equal(again.status, 500, 'the next request gets the slot (and fails the same way)');
  await again.arrayBuffer();
});

test('a long response renews its lease, which outlives its first length', async () => {
  const key = unique('renew');
  const g = gate();
  const a = await serve(concurrencyLimit({ pool: pool(), key, max: 1, lease: 1000, renewEvery: 200 }), g.route);
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
});

test('shadow mode: a token that is no lease lets the request through, and is not renewed', async () => {
  const key = unique('shadow');
  const g = gate();
  g.open();
  const a = await serve(concurrencyLimit({ pool: pool({ options: '-c pklimit.shadow_mode=on' }), key, max: 0, lease: 60000 }),
    g.route);
  const r = await fetch(a.url);
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'ok shadow');
  assert.equal(await held(key), 0, 'nothing held');
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
  const [{ lease }] = await sql('SELECT count(*) AS lease FROM pklimit_leases($1::text)', [key]);
  assert.equal(Number(lease), 0, 'released');
});

test('options are checked when the middleware is made', () => {
  const p = pool();
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 2 }), /lease must be/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 1001, lease: 1000 }), /max must be an integer from 0 to 1000/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', policy: 'p', max: 1 }), /policy '\w+' decides/);
  assert.throws(() => concurrencyLimit({ pool: p, key: 'k', max: 1, lease: 1000, Max: 2 }), /unknown option Max/);
  assert.throws(() => concurrencyLimit({ key: 'k', max: 1, lease: 1000 }), /pool must be/);
});
