'use strict';
// Shared by the tests: apps served on port 0, pools on the libpq
// environment (PGHOST, PGPORT, PGUSER, PGDATABASE) the TAP test sets.

const assert = require('node:assert/strict');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const pg = require('pg');
const { PklimitStore } = require('rate-limit-pklimit');

const HOUR = 3600 * 1000;
const pools = [];
// every app served, closed at the end even after a failed assertion (an
// open server would keep the test process alive)
const servers = [];

function pool(config = {}) {
  const p = new pg.Pool({ max: 4, ...config });
  pools.push(p);
  return p;
}

async function endPools() {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
  await Promise.all(pools.splice(0).map((p) => p.end()));
}

// One app instance ("a replica"): its own pool and store unless given.
// The client's key comes from the X-Client header, so that the tests are
// free of the caller's address.
async function serve({ store, limiter = {}, before = [], route } = {}) {
  const app = express();
  for (const m of before) app.use(m);
  const limit = rateLimit({
    windowMs: HOUR,
    limit: 5,
    standardHeaders: 'draft-6',
    legacyHeaders: false,
    keyGenerator: (req) => req.get('x-client') ?? 'anonymous',
    store: store ?? new PklimitStore({ pool: pool() }),
    ...limiter,
  });
  app.use(limit);
  app.get('/', route ?? ((req, res) => {
    res.status(req.query.fail ? 500 : 200).send(req.query.fail ? 'failed' : 'ok');
  }));
  app.use((error, req, res, next) => { res.status(500).send(`error: ${error.message}`); });
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  servers.push(server);
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    limit,
    get: (path = '/', headers = {}) => fetch(url + path, { headers }),
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

// The administrator's view, outside every app.
let admin;
function adminPool() {
  admin ??= pool({ max: 2 });
  return admin;
}

async function sql(text, values) {
  return (await adminPool().query(text, values)).rows;
}

async function storedCount(storedKey) {
  const rows = await sql('SELECT count FROM platformkit_limits WHERE key = $1', [storedKey]);
  return rows.length ? Number(rows[0].count) : null;
}

// A unique key per test run, so that runs and tests never share a count.
const run = Date.now().toString(36);
const unique = (name) => `${name}-${run}`;

async function statuses(responses) {
  const out = {};
  for (const r of await Promise.all(responses)) {
    out[r.status] = (out[r.status] ?? 0) + 1;
    await r.arrayBuffer();
  }
  return out;
}

// Polls until fn() returns true; a test waits for a condition, not a time.
async function until(fn, what, ms = 30000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// A store that counts the decrements the middleware made of it, once each
// has finished (they come after the response is sent).
class CountingStore extends PklimitStore {
  constructor(options) { super(options); this.decrements = 0; }
  async decrement(key) {
    try {
      await super.decrement(key);
    } finally {
      this.decrements++;
    }
  }
}

// The memory path's counters of this database in pklimit_stats (0 before
// its first call).
async function memoryStats() {
  const rows = await sql('SELECT coalesce(memory_calls, 0)::int AS calls, coalesce(memory_reads, 0)::int AS reads,' +
    ' coalesce(memory_fallbacks, 0)::int AS fallbacks FROM pklimit_stats WHERE datname = current_database()');
  return rows[0] ?? { calls: 0, reads: 0, fallbacks: 0 };
}

// Returns once a flush of the memory path that started after this call
// has committed: everything changed in memory before it is in the table.
// The database's flushed_through (now - flush_lag_ms) is when the last
// complete flush started; read a little after it, hence the margin.
async function flushed() {
  const [{ now }] = await sql('SELECT clock_timestamp()::text AS now');
  const done = "SELECT clock_timestamp() - flush_lag_ms * interval '1 millisecond'" +
    " > $1::timestamptz + interval '50 milliseconds' AS done FROM pklimit_stats WHERE datname = current_database()";
  await until(async () => (await sql(done, [now]))[0]?.done === true, 'a flush');
}

module.exports = {
  HOUR, pool, endPools, serve, sql, storedCount, unique, statuses, until, memoryStats, flushed, CountingStore,
};
