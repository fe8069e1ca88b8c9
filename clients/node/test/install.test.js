'use strict';
// pklimit not where the store looks: not installed in the database, in a
// schema off the search_path, or older than the store needs.  The store
// says which, and what to do, instead of "function ... does not exist".

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore } = require('rate-limit-pklimit');
const { HOUR, pool, endPools, serve, sql, unique } = require('./helpers');

// two databases of their own: one without pklimit, one with pklimit 0.3.0
const none = unique('pklimit_none').replace(/-/g, '_');
const old = unique('pklimit_old').replace(/-/g, '_');

before(async () => {
  await sql(`CREATE DATABASE ${none}`);
  await sql(`CREATE DATABASE ${old}`);
  const p = pool({ database: old, max: 1 });
  await p.query("SET client_min_messages = error; CREATE EXTENSION pklimit VERSION '0.3.0'");
});

after(async () => {
  await endPools();
  const admin = pool({ max: 1 });
  await admin.query(`DROP DATABASE IF EXISTS ${none} WITH (FORCE)`);
  await admin.query(`DROP DATABASE IF EXISTS ${old} WITH (FORCE)`);
  await endPools();
});

// each call of the store, as its own rejection
async function calls(store) {
  store.init({ windowMs: HOUR, limit: 2, skipFailedRequests: true });
  const results = [];
  for (const call of ['increment', 'get', 'decrement', 'resetKey']) {
    results.push(await store[call]('k').then(() => `${call}: ok`, (e) => `${call}: ${e.code} ${e.message}`));
  }
  return results;
}

test('a database without pklimit: the request fails saying to CREATE EXTENSION pklimit there', async () => {
  const app = await serve({ store: new PklimitStore({ pool: pool({ database: none }) }) });
  const r = await app.get('/', { 'x-client': 'a' });
  assert.equal(r.status, 500);
  assert.match(await r.text(), new RegExp(`^error: rate-limit-pklimit: pklimit is not installed in database "${none}":` +
    ' run CREATE EXTENSION pklimit in it .*\\(function pklimit_check\\(.*\\) does not exist\\)$'));
  await app.close();
  const results = await calls(new PklimitStore({ pool: pool({ database: none }) }));
  for (const result of results) assert.match(result, /^\w+: 42883 rate-limit-pklimit: pklimit is not installed/, result);
});

test('pklimit in a schema off the search_path: pass schema', async () => {
  const erlSchema = process.env.PKLIMIT_SCHEMA_DB;
  for (const results of [await calls(new PklimitStore({ pool: pool({ database: erlSchema }) })),
    await calls(new PklimitStore({ pool: pool({ database: erlSchema }), schema: 'public' }))]) {
    for (const result of results) {
      assert.match(result, new RegExp(`^\\w+: 42883 rate-limit-pklimit: pklimit is installed in schema "Rate Limits"` +
        ` of database "${erlSchema}", (which is not on the search_path|not in "public"): pass schema: "Rate Limits" to PklimitStore`),
      result);
    }
  }
  // a schema that does not exist
  for (const result of await calls(new PklimitStore({ pool: pool(), schema: 'Nowhere' }))) {
    assert.match(result, /^\w+: 3F000 rate-limit-pklimit: pklimit is installed in schema "public" of database "\w+", not in "Nowhere": pass schema: "public"/,
      result);
  }
});

test('pklimit older than the store needs: ALTER EXTENSION pklimit UPDATE, or anchor epoch; a policy needs 0.4.0', async () => {
  const results = await calls(new PklimitStore({ pool: pool({ database: old }) }));
  assert.match(results[0], new RegExp(`^increment: 42883 rate-limit-pklimit: pklimit 0.3.0 in database "${old}" is older` +
    " than this store needs \\(0.4.0, for anchor 'first'\\): run ALTER EXTENSION pklimit UPDATE in it, or pass anchor: 'epoch'"));
  assert.match(results[1], /^get: 42883 .*older than this store needs/);
  // pklimit_decrement and pklimit_forget are those of 0.3.0
  assert.deepEqual(results.slice(2), ['decrement: ok', 'resetKey: ok']);
  // anchor epoch: the statements of 0.3.0
  assert.deepEqual(await calls(new PklimitStore({ pool: pool({ database: old }), anchor: 'epoch' })),
    ['increment: ok', 'get: ok', 'decrement: ok', 'resetKey: ok']);
  // a policy: every call needs 0.4.0
  for (const result of await calls(new PklimitStore({ pool: pool({ database: old }), policy: 'api' }))) {
    assert.match(result, new RegExp(`^\\w+: 42883 rate-limit-pklimit: pklimit 0.3.0 in database "${old}" is older` +
      ' than this store needs \\(0.4.0, for policy\\): run ALTER EXTENSION pklimit UPDATE in it \\(function '), result);
  }
});
