#!/usr/bin/env node
// Requests per second through express-rate-limit at 64 concurrent requests
// on one hot key, side by side in one run: no limiter (the ceiling), the
// default MemoryStore, rate-limit-pklimit, and @acpr/rate-limit-postgresql;
// then the two database stores alone (their increment() called directly).
//
//   cd bench/clients && npm ci && node express.js [seconds]    (BENCH_POOL_SIZE, default 16)
//
// The connection is libpq's environment (PGHOST, PGPORT, PGUSER,
// PGDATABASE: a database with pklimit installed).  acpr's tables go to a
// scratch database of their own, BENCH_ACPR_DB (default pklimit_bench_acpr),
// created if missing.  Each app runs in a child process of its own, so that
// the load generator (autocannon, in this process) does not share its event
// loop.  The limit is far above the requests sent: nothing is refused, every
// request does a full store round trip.
'use strict';

const { fork } = require('node:child_process');
const path = require('node:path');

const KINDS = ['none', 'memory', 'pklimit', 'acpr'];
const CONNECTIONS = 64;
const LIMIT = 1e9;
// the same pool size for both database stores
const POOL_SIZE = Number(process.env.BENCH_POOL_SIZE || 16);
const ACPR_DB = process.env.BENCH_ACPR_DB || 'pklimit_bench_acpr';

// --- the app, in a child process -----------------------------------------

// acpr's store starts its migrations in its constructor without waiting
// for them: wait until its function is there.
async function acprReady() {
  const pg = require('pg');
  const check = new pg.Client({ database: ACPR_DB });
  await check.connect();
  for (;;) {
    const r = await check.query("SELECT to_regproc('rate_limit.agg_increment') IS NOT NULL AS ready");
    if (r.rows[0].ready) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await check.end();
}

async function serve(kind) {
  const express = require('express');
  const { rateLimit } = require('express-rate-limit');
  const pg = require('pg');
  const app = express();
  const limiter = (store) => rateLimit({
    windowMs: 3600 * 1000,
    limit: LIMIT,
    standardHeaders: 'draft-6',
    legacyHeaders: false,
    keyGenerator: () => 'hot',
    store,
  });
  if (kind === 'memory') app.use(limiter(undefined));
  if (kind === 'pklimit') {
    const { PklimitStore } = require('../../clients/node');
    const pool = new pg.Pool({ max: POOL_SIZE });
    await pool.query("SELECT pklimit_forget('bench:hot')");
    app.use(limiter(new PklimitStore({ pool, prefix: 'bench:' })));
  }
  if (kind === 'acpr') {
    const { PostgresStore } = require('@acpr/rate-limit-postgresql');
    const admin = new pg.Client();
    await admin.connect();
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [ACPR_DB]);
    if (!exists.rowCount) await admin.query(`CREATE DATABASE "${ACPR_DB.replace(/"/g, '""')}"`);
    await admin.end();
    const config = { database: ACPR_DB, max: POOL_SIZE };
    const store = new PostgresStore(config, `bench-${Date.now()}`);
    app.use(limiter(store));
    await acprReady();
  }
  app.get('/', (req, res) => res.send('ok'));
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
}

// --- the stores alone, in a child process ----------------------------------

// increment() of each database store called directly, 64 at a time, for
// the given seconds: what the store can take when the app around it is not
// what limits the rate (on a machine of two cores, express itself is: even
// the MemoryStore answers less than three times what acpr does).
async function storeOnly(kind, seconds) {
  const pg = require('pg');
  let store;
  if (kind === 'pklimit') {
    const { PklimitStore } = require('../../clients/node');
    const pool = new pg.Pool({ max: POOL_SIZE });
    await pool.query("SELECT pklimit_forget('bench-store:hot')");
    store = new PklimitStore({ pool, prefix: 'bench-store:' });
  } else {
    const { PostgresStore } = require('@acpr/rate-limit-postgresql');
    store = new PostgresStore({ database: ACPR_DB, max: POOL_SIZE }, `bench-store-${Date.now()}`);
    await acprReady();
  }
  store.init({ windowMs: 3600 * 1000, limit: LIMIT });
  const loop = async (end) => { let n = 0; while (Date.now() < end) { await store.increment('hot'); n++; } return n; };
  await Promise.all(Array.from({ length: CONNECTIONS }, () => loop(Date.now() + 1000)));   // warm-up
  const counts = await Promise.all(Array.from({ length: CONNECTIONS }, () => loop(Date.now() + seconds * 1000)));
  return counts.reduce((a, b) => a + b, 0) / seconds;
}

function measureStore(kind, seconds) {
  return new Promise((resolve, reject) => {
    const child = fork(__filename, ['--store', kind, String(seconds)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.once('message', (m) => { child.kill(); resolve(m.rate); });
    child.once('exit', (code) => reject(new Error(`${kind} store run exited with ${code}`)));
  });
}

// --- the load, in this process ---------------------------------------------

function start(kind) {
  return new Promise((resolve, reject) => {
    const child = fork(__filename, ['--serve', kind], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.once('message', (m) => resolve({ child, port: m.port }));
    child.once('exit', (code) => reject(new Error(`${kind} app exited with ${code}`)));
  });
}

async function measure(kind, seconds) {
  const autocannon = require('autocannon');
  const { child, port } = await start(kind);
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: CONNECTIONS, duration: 1 });   // warm-up
  const r = await autocannon({ url, connections: CONNECTIONS, duration: seconds });
  child.removeAllListeners('exit');
  child.kill();
  return { kind, rps: r.requests.average, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors };
}

async function main() {
  const seconds = Number(process.argv[2] || 10);
  const results = [];
  for (const kind of KINDS) results.push(await measure(kind, seconds));
  const by = Object.fromEntries(results.map((r) => [r.kind, r]));
  console.log(`express-rate-limit, ${CONNECTIONS} concurrent requests on one hot key, ${seconds} s each`);
  console.log('store        req/s   p99 ms  non-2xx  errors');
  for (const r of results) {
    console.log(`${r.kind.padEnd(8)} ${r.rps.toFixed(0).padStart(9)} ${String(r.p99).padStart(8)}` +
      ` ${String(r.non2xx).padStart(8)} ${String(r.errors).padStart(7)}`);
  }
  const ratio = (a, b) => (by[a].rps / by[b].rps).toFixed(2);
  const alone = { pklimit: await measureStore('pklimit', seconds), acpr: await measureStore('acpr', seconds) };
  console.log(`pklimit / acpr:   ${ratio('pklimit', 'acpr')}x`);
  console.log(`pklimit / memory: ${ratio('pklimit', 'memory')}x`);
  console.log(`pklimit / none:   ${ratio('pklimit', 'none')}x`);
  console.log(`memory / none:    ${ratio('memory', 'none')}x`);
  console.log(`memory / acpr:    ${ratio('memory', 'acpr')}x   (the most any store can be, through this app on this machine)`);
  console.log(`the stores alone, increment() ${CONNECTIONS} at a time: pklimit ${alone.pklimit.toFixed(0)}/s,` +
    ` acpr ${alone.acpr.toFixed(0)}/s, pklimit / acpr: ${(alone.pklimit / alone.acpr).toFixed(2)}x`);
}

if (process.argv[2] === '--store') {
  storeOnly(process.argv[3], Number(process.argv[4]))
    .then((rate) => process.send({ rate }))
    .catch((error) => { console.error(error); process.exit(1); });
} else if (process.argv[2] === '--serve') {
  serve(process.argv[3]).catch((error) => { console.error(error); process.exit(1); });
} else {
  main().catch((error) => { console.error(error); process.exit(1); });
}
