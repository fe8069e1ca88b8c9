'use strict';
// Through pgbouncer in transaction mode with one server connection shared
// by every client (PKLIMIT_BOUNCER_PORT, the TAP test starts it): unnamed
// statements only, and the tenant of one statement never reaches another.

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { PklimitStore, pklimitTenant } = require('rate-limit-pklimit');
const { pool, endPools, serve, sql, unique, statuses } = require('./helpers');

after(endPools);

const bouncer = () => pool({ port: Number(process.env.PKLIMIT_BOUNCER_PORT), max: 8 });

test('two replicas through pgbouncer (pool size 1): exact limits per tenant', async () => {
  const client = unique('bouncer');
  const tenant = pklimitTenant((req) => req.get('x-tenant'));
  const pa = bouncer();
  const pb = bouncer();
  // every client connection is on the one server connection
  const conns = await Promise.all([pa.connect(), pa.connect(), pb.connect()]);
  const pids = new Set();
  for (const c of conns) pids.add((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
  conns.forEach((c) => c.release());
  assert.equal(pids.size, 1, 'three clients, one server connection');
  // a session-level SET leaks to the shared server connection: the store's
  // calls must not depend on what it carries
  await pa.query("SET platformkit.tenant = 'x'");
  assert.equal((await pb.query("SELECT current_setting('platformkit.tenant', true) AS t")).rows[0].t, 'x',
    'the leak is real');

  const a = await serve({ store: new PklimitStore({ pool: pa }), before: [tenant], limiter: { limit: 10 } });
  const b = await serve({ store: new PklimitStore({ pool: pb }), before: [tenant], limiter: { limit: 10 } });
  const requests = [];
  for (let i = 0; i < 60; i++) {
    const t = ['acme', 'globex', undefined][i % 3];
    requests.push((i % 2 ? a : b).get('/', t ? { 'x-client': client, 'x-tenant': t } : { 'x-client': client }));
  }
  assert.deepEqual(await statuses(requests), { 200: 30, 429: 30 }, '10 of 20 per tenant');
  assert.deepEqual(await sql(
    "SELECT key, count::int FROM platformkit_limits WHERE key LIKE '%' || $1 ORDER BY key COLLATE \"C\"", [client]),
  [{ key: `g:rl:${client}`, count: 20 }, { key: `t4:acme:rl:${client}`, count: 20 },
    { key: `t6:globex:rl:${client}`, count: 20 }], 'nothing under the leaked tenant x');
  await a.limit.resetKey(client);
  assert.equal((await sql('SELECT count(*)::int AS n FROM platformkit_limits WHERE key = $1', [`g:rl:${client}`]))[0].n, 0,
    'resetKey through pgbouncer');
  await pa.query('RESET platformkit.tenant');
  await a.close();
  await b.close();
});
