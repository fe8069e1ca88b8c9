'use strict';
// Where a fixed window starts: at the key's first hit (anchor 'first', the
// default), as express-rate-limit's MemoryStore starts it, or at a multiple
// of the window from the Unix epoch (anchor 'epoch').

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore } = require('rate-limit-pklimit');
const { HOUR, pool, endPools, serve, sql, unique } = require('./helpers');

after(endPools);

const peekReset = async (key, anchor) => (await sql(
  `SELECT reset_at FROM pklimit_check($1, 5, '3600000 milliseconds', cost => 0, anchor => '${anchor}')`, [key]))[0].reset_at;

test('anchor first (the default): a key\'s window starts at its first hit, RateLimit-Reset the whole window', async () => {
  const app = await serve({ limiter: { limit: 2, legacyHeaders: true } });
  for (const name of ['first-a', 'first-b']) {
    const client = unique(name);
    const before = Date.now();
    const r = await app.get('/', { 'x-client': client });
    const after = Date.now();
    assert.equal(r.status, 200);
    const resetAt = await peekReset(`rl:${client}`, 'first');
    assert.ok(resetAt >= before + HOUR && resetAt <= after + 1 + HOUR, `${name}: reset_at ${resetAt.toISOString()}`);
    // 3600 unless the answer took over a second
    const reset = Number(r.headers.get('ratelimit-reset'));
    assert.ok(reset >= Math.ceil((resetAt - after) / 1000) && reset <= 3600, `RateLimit-Reset ${reset}`);
    assert.equal(r.headers.get('x-ratelimit-reset'), String(Math.ceil(resetAt / 1000)));
  }
  await app.close();
});

test('anchor epoch: every key\'s window ends on a multiple of the window from the Unix epoch', async () => {
  const app = await serve({ store: new PklimitStore({ pool: pool(), anchor: 'epoch' }), limiter: { limit: 2 } });
  const client = unique('epoch');
  const before = Date.now();
  const r = await app.get('/', { 'x-client': client });
  const after = Date.now();
  assert.equal(r.status, 200);
  const resetAt = await peekReset(`rl:${client}`, 'epoch');
  assert.equal(resetAt.getTime() % HOUR, 0, 'the window ends on an hour of the epoch');
  const reset = Number(r.headers.get('ratelimit-reset'));
  assert.ok(reset >= Math.ceil((resetAt - after) / 1000) && reset <= Math.ceil((resetAt - before) / 1000),
    `RateLimit-Reset ${reset}`);
  await app.close();
});

test('anchor => \'first\' goes into every pklimit_check of a fixed window, and only there', async () => {
  const p = pool({ max: 2 });
  const client = unique('anchor-sql');
  const cases = [
    [{}, 5, 'first'],
    [{ algorithm: 'fixed' }, 5, 'first'],
    [{ algorithm: 'gcra' }, 5, 'none'],
    [{ algorithm: 'sliding' }, 5, 'none'],
    [{ algorithm: 'gcra' }, () => 5, 'first'], // a limit function: a fixed window
    [{ anchor: 'epoch' }, 5, 'none'],
    [{ anchor: 'epoch', durable: false }, 5, 'none'],
    [{ durable: false }, 5, 'first'],
  ];
  for (const [options, limit, anchor] of cases) {
    const sent = [];
    const store = new PklimitStore({
      pool: { query: (text, values) => { sent.push(text); return p.query(text, values); } },
      ...options,
    });
    store.init({ windowMs: HOUR, limit, skipFailedRequests: true });
    // every call made for real: pklimit refuses anchor 'first' with gcra or sliding
    const key = `${client}-${JSON.stringify(options)}-${typeof limit}`;
    assert.equal((await store.increment(key)).totalHits, 1);
    assert.equal((await store.get(key)).totalHits, 1);
    await store.decrement(key);
    const anchors = sent.filter((t) => t.includes('pklimit_check')).map((t) => /anchor => '(\w+)'/.exec(t)?.[1] ?? 'none');
    assert.deepEqual(anchors, [anchor, anchor], `${JSON.stringify(options)}, limit ${typeof limit}`);
  }
});

test('getKey of a key taken back to 0 hits: the key with 0 hits, as the MemoryStore answers', async () => {
  for (const durable of [true, false]) {
    const client = unique(`zero-${durable}`);
    const store = new PklimitStore({ pool: pool(), durable });
    const app = await serve({ store, limiter: { limit: 3 } });
    assert.equal(await app.limit.getKey(client), undefined, 'a key never seen: undefined');
    const before = Date.now();
    await app.get('/', { 'x-client': client });
    const after = Date.now();
    await store.decrement(client);
    await store.decrement(client);
    const info = await app.limit.getKey(client);
    assert.equal(info?.totalHits, 0, `durable ${durable}: 0 hits`);
    assert.ok(info.resetTime >= before + HOUR && info.resetTime <= after + 1 + HOUR, 'the window\'s end');
    await app.limit.resetKey(client);
    assert.equal(await app.limit.getKey(client), undefined, 'after resetKey: undefined');
    await app.close();
  }
  // an epoch-aligned window reads the same open or not: undefined
  const store = new PklimitStore({ pool: pool(), anchor: 'epoch' });
  store.init({ windowMs: HOUR, limit: 3 });
  const client = unique('zero-epoch');
  await store.increment(client);
  await store.decrement(client);
  assert.equal(await store.get(client), undefined);
});
