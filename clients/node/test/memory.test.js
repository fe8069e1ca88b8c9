'use strict';
// durable: false, pklimit's memory path, in express-rate-limit's real
// middleware: as exact as the durable path, decided in shared memory, in
// the table within pklimit.flush_interval (docs/memory.md).

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore } = require('rate-limit-pklimit');
const {
  HOUR, pool, endPools, serve, sql, storedCount, unique, statuses, until, memoryStats, flushed, CountingStore,
} = require('./helpers');

after(endPools);

const memoryStore = (options = {}) => new PklimitStore({ pool: pool({ max: 8 }), durable: false, ...options });
// the count as pklimit_count reads it: exact on both paths, before a flush
const exactCount = async (key) => Number((await sql('SELECT pklimit_count($1) AS n', [key]))[0].n);

test('durable: false, two replicas under concurrency: exactly N pass, decided in memory, in the table after a flush', async () => {
  const before = await memoryStats();
  const a = await serve({ store: memoryStore(), limiter: { limit: 10 } });
  const b = await serve({ store: memoryStore(), limiter: { limit: 10 } });
  const client = unique('memory-replicas');
  // the first call reads the key into memory, through the worker
  assert.equal((await a.get('/', { 'x-client': client })).status, 200);
  const got = await statuses(Array.from({ length: 39 }, (_, i) =>
    (i % 2 ? a : b).get('/', { 'x-client': client })));
  assert.deepEqual(got, { 200: 9, 429: 30 });
  assert.equal(await exactCount(`rl:${client}`), 40, 'pklimit_count sees every hit at once');
  await until(async () => (await storedCount(`g:rl:${client}`)) === 40, 'the flush of 40 hits');
  const now = await memoryStats();
  assert.ok(now.reads > before.reads, `the key was read into memory (memory_reads ${before.reads} -> ${now.reads})`);
  assert.ok(now.calls > before.calls, `calls were decided in memory (memory_calls ${before.calls} -> ${now.calls})`);
  // more requests, after the flush, stay exact
  assert.equal((await b.get('/', { 'x-client': client })).status, 429);
  await until(async () => (await storedCount(`g:rl:${client}`)) === 41, 'the flush of the 41st hit');
  await a.close();
  await b.close();
});

test('durable: false: RateLimit-* and Retry-After headers from pklimit\'s reset time', async () => {
  const client = unique('memory-headers');
  const app = await serve({ store: memoryStore(), limiter: { limit: 3 } });
  const responses = [];
  for (let i = 0; i < 5; i++) {
    const before = Date.now();
    const r = await app.get('/', { 'x-client': client });
    responses.push({ r, before, after: Date.now() });
    await r.arrayBuffer();
  }
  const [{ reset_at: resetAt }] = await sql(
    "SELECT reset_at FROM pklimit_check($1, 3, '3600000 milliseconds', cost => 0, anchor => 'first')", [`rl:${client}`]);
  assert.ok(resetAt >= responses[0].before + HOUR && resetAt <= responses[0].after + 1 + HOUR,
    `the window ends an hour after the first hit: ${resetAt.toISOString()}`);
  assert.deepEqual(responses.map(({ r }) => r.status), [200, 200, 200, 429, 429]);
  assert.deepEqual(responses.map(({ r }) => r.headers.get('ratelimit-remaining')), ['2', '1', '0', '0', '0']);
  for (const { r, before, after } of responses) {
    const lo = Math.ceil((resetAt - after) / 1000);
    const hi = Math.ceil((resetAt - before) / 1000);
    assert.equal(r.headers.get('ratelimit-limit'), '3');
    const reset = Number(r.headers.get('ratelimit-reset'));
    assert.ok(reset >= lo && reset <= hi, `RateLimit-Reset ${reset} is ${lo}..${hi} s to pklimit's reset_at`);
    if (r.status === 429) {
      const retry = Number(r.headers.get('retry-after'));
      assert.ok(retry >= lo && retry <= hi, `Retry-After ${retry} is ${lo}..${hi} s`);
    } else {
      assert.equal(r.headers.get('retry-after'), null);
    }
  }
  await until(async () => (await storedCount(`g:rl:${client}`)) === 5, 'the flush of 5 hits');
  await app.close();
});

test('durable: false with skipFailedRequests: 50 concurrent requests, 20 failing, taken back in memory', async () => {
  const client = unique('memory-skip');
  const store = new CountingStore({ pool: pool({ max: 8 }), durable: false });
  const app = await serve({ store, limiter: { limit: 1000, skipFailedRequests: true } });
  assert.equal((await app.get('/', { 'x-client': client })).status, 200, 'the key read into memory');
  const before = await memoryStats();
  const got = await statuses(Array.from({ length: 50 }, (_, i) =>
    app.get(i % 5 < 2 ? '/?fail=1' : '/', { 'x-client': client })));
  assert.deepEqual(got, { 200: 30, 500: 20 });
  await until(() => store.decrements >= 20, '20 decrements');
  assert.equal(store.decrements, 20);
  assert.equal(await exactCount(`rl:${client}`), 31, 'every failed request taken back, before a flush');
  await until(async () => (await storedCount(`g:rl:${client}`)) === 31, 'the flush of the count after the decrements');
  assert.ok((await memoryStats()).calls > before.calls, 'decided in memory');
  const r = await app.get('/', { 'x-client': client });
  assert.equal(r.headers.get('ratelimit-remaining'), String(1000 - 31 - 1));
  await app.close();
});

test('durable: false is passed to every pklimit_check (the peek too) and pklimit_decrement', async () => {
  const p = pool({ max: 2 });
  const recorded = (options) => {
    const sent = [];
    const store = new PklimitStore({
      pool: { query: (text, values) => { sent.push({ text, values }); return p.query(text, values); } },
      ...options,
    });
    store.init({ windowMs: HOUR, limit: 3, skipFailedRequests: true });
    return { store, sent };
  };
  // the durable value of each statement sent, by its function: false when
  // false; the default leaves it out, pklimit's own default
  const durableOf = ({ text }) => {
    const fn = /pklimit_(check|decrement|forget)\(/.exec(text)[1];
    const m = /durable => (\w+)/.exec(text);
    return [fn, m ? m[1] === 'true' : 'none'];
  };
  const client = unique('memory-sql');
  for (const [options, durable] of [[{ durable: false }, false], [{ durable: false, algorithm: 'gcra' }, false],
    [{}, true], [{ durable: true }, true]]) {
    const { store, sent } = recorded(options);
    const key = `${client}-${JSON.stringify(options)}`;
    await store.increment(key);
    await store.get(key);
    await store.decrement(key);
    await store.resetKey(key);
    const d = durable ? 'none' : false;
    assert.deepEqual(sent.map(durableOf),
      [['check', d], ['check', d], ['decrement', d], ['forget', 'none']], JSON.stringify(options));
  }
  // and pklimit took them: the calls of a key in memory are decided there
  const { store } = recorded({ durable: false });
  const before = await memoryStats();
  await store.increment(client);
  await until(async () => {
    await store.get(client);
    return (await memoryStats()).calls > before.calls;
  }, 'a peek decided in memory');
});

test('durable: false: get records nothing, resetKey forgets, in memory and in the table', async () => {
  const client = unique('memory-reset');
  const key = `g:rl:${client}`;
  const app = await serve({ store: memoryStore(), limiter: { limit: 3 } });
  assert.equal(await app.limit.getKey(client), undefined, 'get: undefined for a key with no hits');
  assert.equal(await app.limit.getKey(client), undefined, 'twice');
  await flushed();
  assert.equal(await storedCount(key), null, 'get created no row, even after a flush');
  for (let i = 0; i < 4; i++) await app.get('/', { 'x-client': client });
  assert.equal((await app.limit.getKey(client)).totalHits, 4, 'get: every hit, before a flush');
  await until(async () => (await storedCount(key)) === 4, 'the flush of 4 hits');
  await app.limit.resetKey(client);
  assert.equal(await app.limit.getKey(client), undefined, 'forgotten');
  assert.equal(await storedCount(key), null, 'resetKey deleted the row');
  await flushed();
  assert.equal(await storedCount(key), null, 'and no flush wrote it back');
  const r = await app.get('/', { 'x-client': client });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('ratelimit-remaining'), '2', 'a fresh count after resetKey');
  await app.close();
});

test('durable must be a boolean', () => {
  for (const durable of ['false', 0, null]) {
    assert.throws(() => new PklimitStore({ pool: pool(), durable }), /durable must be true or false/, String(durable));
  }
  assert.equal(new PklimitStore({ pool: pool() }).durable, true, 'the default');
  assert.equal(new PklimitStore({ pool: pool(), durable: undefined }).durable, true, 'undefined: the default');
});
