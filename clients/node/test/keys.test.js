'use strict';
// Keys from a request (a user name, a header) can hold anything a string
// can: a NUL, which text cannot store, or a lone surrogate, which reaches
// the server as U+FFFD.  Each must count on its own, and never fail at the
// server: with passOnStoreError a failing key would not be limited at all.
// A limit past the largest bigint (Infinity) refuses nothing, and fails
// nothing either.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { pool, endPools, serve, sql, unique } = require('./helpers');
const { PklimitStore } = require('rate-limit-pklimit');

after(endPools);

// A key in a header, as its UTF-16 code units in hex (a header holds
// neither a NUL nor a lone surrogate), and back.
const toHeader = (key) => Array.from({ length: key.length }, (_, i) => key.charCodeAt(i).toString(16).padStart(4, '0')).join('');
const fromHeader = (hex) => String.fromCharCode(...hex.match(/.{4}/g).map((h) => parseInt(h, 16)));

// count requests as one client; their statuses
async function send(served, key, count) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const r = await served.get('/', { 'x-client': toHeader(key) });
    await r.arrayBuffer();
    out.push(r.status);
  }
  return out;
}

test('keys with a NUL, lone surrogates or %: limited, each on its own', async () => {
  const store = new PklimitStore({ pool: pool() });
  const served = await serve({
    store,
    limiter: { limit: 2, passOnStoreError: true, keyGenerator: (req) => fromHeader(req.get('x-client')) },
  });
  const base = unique('odd');
  // '%00' and '%25' written out, beside the characters they escape
  const keys = [`${base}\0`, `${base}\uD800`, `${base}\uDC00`, `${base}\uFFFD`, `${base}%00`, `${base}%`, `${base}%25`];
  for (const key of keys) {
    assert.deepEqual(await send(served, key, 3), [200, 200, 429], `key ${JSON.stringify(key)}`);
  }
  const stored = await sql("SELECT count(*)::int AS n FROM platformkit_limits WHERE key LIKE 'g:rl:' || $1 || '%'", [base]);
  assert.equal(stored[0].n, keys.length, 'one row per key');
  await served.close();
});

test('a limit of Infinity or past the largest bigint refuses nothing and fails nothing', async () => {
  for (const limit of [Infinity, 2 ** 63, 1e19]) {
    const served = await serve({ store: new PklimitStore({ pool: pool() }), limiter: { limit } });
    assert.deepEqual(await send(served, unique(`inf-${limit}`), 3), [200, 200, 200], `limit ${limit}`);
    await served.close();
  }
});
