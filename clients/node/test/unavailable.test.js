'use strict';
// The store when pklimit cannot be reached: each pklimit.on_unavailable
// answer, through the middleware, with passOnStoreError false and true.
// Made honestly: the key's row is locked by an open transaction for longer
// than pklimit.timeout, so pklimit answers lock_timeout.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore } = require('rate-limit-pklimit');
const { pool, endPools, serve, sql, storedCount, unique } = require('./helpers');

const client = unique('unavailable');
const stored = `g:rl:${client}`;
let locker;

async function setOnUnavailable(mode, p) {
  await sql(`ALTER SYSTEM SET pklimit.on_unavailable = '${mode}'`);
  await sql('SELECT pg_reload_conf()');
  // the store's one connection has read the new setting
  for (;;) {
    const { rows } = await p.query("SELECT current_setting('pklimit.on_unavailable') AS v");
    if (rows[0].v === mode) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

before(async () => {
  // the row exists, with one hit, then stays locked
  await sql("SELECT count FROM pklimit_check($1, 1, '1 hour')", [`rl:${client}`]);
  locker = await pool({ max: 1 }).connect();
  await locker.query('BEGIN');
  const { rows } = await locker.query('SELECT count FROM platformkit_limits WHERE key = $1 FOR UPDATE', [stored]);
  assert.deepEqual(rows, [{ count: '1' }]);
});

after(async () => {
  await locker.query('ROLLBACK');
  locker.release();
  await sql('ALTER SYSTEM RESET pklimit.on_unavailable');
  await sql('SELECT pg_reload_conf()');
  await endPools();
});

// One app per case: a pool of one connection with a short budget, a store
// that keeps its warnings, a limiter that keeps its errors.
async function app(passOnStoreError) {
  const p = pool({ max: 1, options: '-c pklimit.timeout=200ms' });
  const warnings = [];
  const errors = [];
  const store = new PklimitStore({ pool: p, logger: (m) => warnings.push(m) });
  const logger = { warn: () => {}, error: (e, m) => errors.push(`${m}: ${e.message}`) };
  const served = await serve({ store, limiter: { limit: 1, passOnStoreError, logger } });
  return { p, store, served, warnings, errors };
}

for (const passOnStoreError of [false, true]) {
  test(`on_unavailable = allow, passOnStoreError ${passOnStoreError}: the request passes, with a warning`, async () => {
    const a = await app(passOnStoreError);
    await setOnUnavailable('allow', a.p);
    const r = await a.served.get('/', { 'x-client': client });
    assert.equal(r.status, 200, 'a key already at its limit passes: pklimit answered allow');
    assert.equal(r.headers.get('ratelimit-remaining'), '1', 'no hits reported: the whole limit remains');
    assert.equal(r.headers.get('ratelimit-reset'), '3600', 'no reset time: windowMs');
    assert.equal(a.warnings.length, 1);
    assert.match(a.warnings[0], /store unavailable \((lock_timeout|timeout)\) for increment of key rl:.*answered allow/);
    // a peek reads the latest committed count and waits for no lock
    assert.equal((await a.store.get(client)).totalHits, 1, 'get: the real count');
    await a.store.decrement(client);
    await a.store.resetKey(client);
    assert.equal(a.warnings.length, 3, 'decrement and resetKey warn too');
    assert.match(a.warnings[1], /decrement .*nothing taken back/);
    assert.match(a.warnings[2], /reset .*the count stays/);
    // express-rate-limit checks the first totalHits of a limiter's life
    // only: an unavailable store at that request is reported once
    assert.equal(a.errors.length, 1);
    assert.match(a.errors[0], /must be a positive integer, got 0/);
    assert.equal((await a.served.get('/', { 'x-client': client })).status, 200, 'a second request passes too');
    assert.equal(a.errors.length, 1, 'and is not reported again');
    await a.served.close();
  });

  test(`on_unavailable = deny, passOnStoreError ${passOnStoreError}: 429, with a warning`, async () => {
    const a = await app(passOnStoreError);
    await setOnUnavailable('deny', a.p);
    const r = await a.served.get('/', { 'x-client': client });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('ratelimit-remaining'), '0');
    assert.equal(r.headers.get('retry-after'), '3600', 'no reset time: windowMs');
    assert.equal(a.warnings.length, 1);
    assert.match(a.warnings[0], /store unavailable \((lock_timeout|timeout)\) for increment .*answered deny/);
    assert.deepEqual(a.errors, [], 'an answer, not a store error: passOnStoreError does not apply');
    await a.served.close();
  });

  test(`on_unavailable = error, passOnStoreError ${passOnStoreError}: ${passOnStoreError ? 'passes unlimited' : 'the request fails'}`, async () => {
    const a = await app(passOnStoreError);
    await setOnUnavailable('error', a.p);
    const r = await a.served.get('/', { 'x-client': client });
    const body = await r.text();
    if (passOnStoreError) {
      assert.equal(r.status, 200);
      assert.equal(body, 'ok');
      assert.equal(r.headers.get('ratelimit-remaining'), null, 'not limited: no headers');
      assert.equal(a.errors.length, 1);
      assert.match(a.errors[0], /error from store, allowing request without rate-limiting.*: .*pklimit/);
    } else {
      assert.equal(r.status, 500);
      assert.match(body, /^error: .*pklimit/);
      assert.deepEqual(a.errors, []);
    }
    assert.deepEqual(a.warnings, [], 'an error, not a warning');
    await assert.rejects(a.store.decrement(client), /pklimit/, 'decrement rejects');
    await assert.rejects(a.store.resetKey(client), /pklimit/, 'resetKey rejects');
    await a.served.close();
  });
}

test('none of the unavailable calls recorded anything', async () => {
  await locker.query('ROLLBACK');
  assert.equal(await storedCount(stored), 1);
  await locker.query('BEGIN');
});
