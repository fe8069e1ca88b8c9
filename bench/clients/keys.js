#!/usr/bin/env node
// The memory path over many keys, from Node.js: calls/s over KEYS random
// keys (default 100,000), side by side in one run.
//
//   cd bench/clients && npm ci && node keys.js [seconds]    (KEYS, BENCH_POOL_SIZE: 64)
//
// 1. node-postgres alone, a pool of 64 with 64 calls in flight: SELECT 1
//    (the round-trip floor), pklimit_allow durable, pklimit_allow with
//    durable => false: the calls themselves, no web framework around them;
// 2. through Express and express-rate-limit with rate-limit-pklimit, each
//    request's key drawn at random in the app, 64 concurrent requests
//    (autocannon), durable and durable: false.
//
// Each pklimit run starts with SECONDS of warm-up (its keys come into
// memory; the durable path gets the same), then SECONDS measured.  The
// connection is libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE: a
// database with pklimit).  The limit is far above the calls made: nothing
// is refused.  Reported, not asserted.
'use strict';

const { fork } = require('node:child_process');

const KEYS = Number(process.env.KEYS || 100000);
const CONNECTIONS = 64;
const POOL_SIZE = Number(process.env.BENCH_POOL_SIZE || 64);
const key = () => `k${1 + Math.floor(Math.random() * KEYS)}`;

const STATEMENTS = {
  select1: ['SELECT 1', () => []],
  durable: ["SELECT pklimit_allow($1::text, 1000000000, '1 hour')", () => [key()]],
  memory: ["SELECT pklimit_allow($1::text, 1000000000, '1 hour', durable => false)", () => [key()]],
};

// calls/s of one statement, CONNECTIONS at a time on a pool of POOL_SIZE
async function driver(kind, seconds, warmup) {
  const pg = require('pg');
  const pool = new pg.Pool({ max: POOL_SIZE });
  const [text, args] = STATEMENTS[kind];
  const loop = async (end) => { let n = 0; while (Date.now() < end) { await pool.query(text, args()); n++; } return n; };
  const run = async (s) => (await Promise.all(Array.from({ length: CONNECTIONS },
    () => loop(Date.now() + s * 1000)))).reduce((a, b) => a + b, 0) / s;
  if (warmup) await run(seconds);
  const rate = await run(seconds);
  await pool.end();
  return rate;
}

async function serve(durable) {
  const express = require('express');
  const { rateLimit } = require('express-rate-limit');
  const pg = require('pg');
  const { PklimitStore } = require('../../clients/node');
  const app = express();
  app.use(rateLimit({
    windowMs: 3600 * 1000,
    limit: 1e9,
    standardHeaders: 'draft-6',
    legacyHeaders: false,
    keyGenerator: key,
    store: new PklimitStore({ pool: new pg.Pool({ max: POOL_SIZE }), prefix: 'bench-keys:', durable }),
  }));
  app.get('/', (req, res) => res.send('ok'));
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
}

function child(args) {
  return fork(__filename, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

function measureDriver(kind, seconds, warmup) {
  return new Promise((resolve, reject) => {
    const c = child(['--driver', kind, String(seconds), warmup ? '1' : '0']);
    c.once('message', (m) => { c.kill(); resolve(m.rate); });
    c.once('exit', (code) => reject(new Error(`${kind} run exited with ${code}`)));
  });
}

async function measureExpress(durable, seconds) {
  const autocannon = require('autocannon');
  const c = child(['--serve', durable ? 'durable' : 'memory']);
  const port = await new Promise((resolve, reject) => {
    c.once('message', (m) => resolve(m.port));
    c.once('exit', (code) => reject(new Error(`app exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: CONNECTIONS, duration: seconds });   // warm-up
  const r = await autocannon({ url, connections: CONNECTIONS, duration: seconds });
  c.removeAllListeners('exit');
  c.kill();
  return { rps: r.requests.average, non2xx: r.non2xx, errors: r.errors };
}

async function main() {
  const seconds = Number(process.argv[2] || 5);
  const select1 = await measureDriver('select1', seconds, false);
  const durable = await measureDriver('durable', seconds, true);
  const memory = await measureDriver('memory', seconds, true);
  const expDurable = await measureExpress(true, seconds);
  const expMemory = await measureExpress(false, seconds);
  const r = (a, b) => (a / b).toFixed(2);
  console.log(`${KEYS} random keys, ${CONNECTIONS} in flight, a pool of ${POOL_SIZE}, ${seconds} s each (after ${seconds} s of warm-up)`);
  console.log(`node-postgres alone:  SELECT 1 ${select1.toFixed(0)}/s, durable ${durable.toFixed(0)}/s,` +
    ` memory ${memory.toFixed(0)}/s`);
  console.log(`  memory / durable ${r(memory, durable)}x, memory / SELECT 1 ${r(memory, select1)}x,` +
    ` durable / SELECT 1 ${r(durable, select1)}x`);
  console.log(`through express-rate-limit: durable ${expDurable.rps.toFixed(0)} req/s, memory ${expMemory.rps.toFixed(0)}` +
    ` req/s (non-2xx ${expDurable.non2xx}/${expMemory.non2xx}, errors ${expDurable.errors}/${expMemory.errors}):` +
    ` memory / durable ${r(expMemory.rps, expDurable.rps)}x`);
}

if (process.argv[2] === '--driver') {
  driver(process.argv[3], Number(process.argv[4]), process.argv[5] === '1')
    .then((rate) => process.send({ rate }))
    .catch((error) => { console.error(error); process.exit(1); });
} else if (process.argv[2] === '--serve') {
  serve(process.argv[3] === 'durable').catch((error) => { console.error(error); process.exit(1); });
} else {
  main().catch((error) => { console.error(error); process.exit(1); });
}
