'use strict';
// skipFailedRequests and skipSuccessfulRequests: the middleware takes a
// request back (decrement) by its key alone, once its response is known.
// An increment that recorded nothing a decrement could take back (a GCRA
// refusal, an unavailable answer) must leave its own request's decrement
// empty, and no other request's.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { pool, endPools, serve, sql, storedCount, unique, until, CountingStore } = require('./helpers');

after(endPools);

// An app whose route answers 401 for ?fail=1: a client's requests, one at
// a time, each once the middleware has taken back (or not) the ones before
// it: a decrement of each success (skipSuccessfulRequests) or failure.
async function app(store, limiter, before = async () => {}) {
  const served = await serve({
    store, limiter,
    route: async (req, res) => {
      await before(req);
      res.status(req.query.fail ? 401 : 200).send(req.query.fail ? 'denied' : 'ok');
    },
  });
  const statuses = [];
  const send = async (client, path) => {
    const r = await served.get(path, { 'x-client': client });
    await r.arrayBuffer();
    statuses.push(r.status);
    const taken = statuses.filter((s) => (s < 400) === Boolean(limiter.skipSuccessfulRequests)).length;
    await until(() => store.decrements >= taken, `${taken} decrements`);
    assert.equal(store.decrements, taken, `after request ${statuses.length}`);
  };
  return { served, statuses, send };
}

const bucket = async (key) => (await sql('SELECT pklimit_count($1)::int AS n', [key]))[0].n;

test('gcra, skipSuccessfulRequests: a refusal leaves the later successes\' decrements to them', async () => {
  const client = unique('gcra-own');
  const store = new CountingStore({ pool: pool(), algorithm: 'gcra' });
  const { served, statuses, send } = await app(store, { windowMs: 2000, limit: 1, skipSuccessfulRequests: true });
  await send(client, '/?fail=1');
  await send(client, '/');
  // the refusal filled the bucket for a window: wait until it is empty
  await until(async () => (await bucket(`rl:${client}`)) === 0, 'the bucket to empty', 10000);
  await send(client, '/');
  await send(client, '/');
  await send(client, '/?fail=1');
  assert.deepEqual(statuses, [401, 429, 200, 200, 401], 'each success taken back, as under a fixed window');
  await served.close();
});

test('gcra, skipSuccessfulRequests: refusals of many keys leave no state in the store', async () => {
  const store = new CountingStore({ pool: pool({ max: 8 }), algorithm: 'gcra' });
  const { served, statuses, send } = await app(store, { limit: 1, skipSuccessfulRequests: true });
  for (let i = 0; i < 20; i++) {
    await send(unique(`gcra-keys-${i}`), '/?fail=1');
    await send(unique(`gcra-keys-${i}`), '/');
  }
  assert.deepEqual(statuses, Array(20).fill([401, 429]).flat());
  const kept = Object.entries(store).filter(([, v]) => (v instanceof Map || v instanceof Set) && v.size > 0);
  assert.deepEqual(kept.map(([name, v]) => `${name}: ${v.size}`), [], 'nothing kept per key');
  await served.close();
});

// The key's row, with hits (0 or 1) events, locked past pklimit.timeout:
// pklimit answers unavailable, and on_unavailable allow lets the requests
// through.  Returns the end of the outage.
async function outage(key, hits) {
  // a row is made by a hit: taken back unless it is to stay
  await sql("SELECT pklimit_check($1, 2, '1 hour'), pklimit_decrement($1, 1 - $2::int)", [key, hits]);
  const locker = await pool({ max: 1 }).connect();
  await locker.query('BEGIN');
  await locker.query('SELECT count FROM platformkit_limits WHERE key = $1 FOR UPDATE', [`g:${key}`]);
  let ended = false;
  return async () => {
    if (ended) return;
    ended = true;
    await locker.query('ROLLBACK');
    locker.release();
  };
}

function outageStore(warnings) {
  return new CountingStore({
    pool: pool({ max: 2, options: '-c pklimit.timeout=200ms -c pklimit.on_unavailable=allow' }),
    logger: (m) => warnings.push(m),
  });
}

test('skipFailedRequests: a failure answered unavailable takes nothing back, though the outage is over', async () => {
  const client = unique('outage-own');
  const key = `rl:${client}`;
  const end = await outage(key, 1);
  const warnings = [];
  const store = outageStore(warnings);
  // the request ends the outage before it fails: its decrement finds pklimit answering
  const { served, statuses, send } = await app(store, { limit: 2, skipFailedRequests: true, validate: false }, end);
  try {
    await send(client, '/?fail=1');
  } finally {
    await end();
  }
  assert.deepEqual(statuses, [401]);
  assert.equal(warnings.length, 1, 'answered unavailable');
  assert.equal(await storedCount(`g:${key}`), 1, 'the hit before the outage stays');
  await served.close();
});

test('skipFailedRequests after a moment of outage: the outage\'s requests leave the later failures\' decrements to them', async () => {
  const client = unique('outage');
  const key = `rl:${client}`;
  const end = await outage(key, 0);
  const warnings = [];
  const store = outageStore(warnings);
  const { served, statuses, send } = await app(store, { limit: 2, skipFailedRequests: true, validate: false });
  try {
    await send(client, '/');
    await send(client, '/');
  } finally {
    await end();
  }
  assert.equal(warnings.length, 2, 'both answered unavailable');
  for (let i = 0; i < 3; i++) await send(client, '/?fail=1');
  await send(client, '/');
  assert.deepEqual(statuses, [200, 200, 401, 401, 401, 200], 'every failure taken back');
  assert.equal(await storedCount(`g:${key}`), 1, 'the success counted');
  await served.close();
});
