#!/usr/bin/env node
// The memory path over many keys, from Node.js: calls/s over KEYS random
// keys (default 100,000), side by side in one run.
//
//   cd bench/clients && npm ci && node keys.js [seconds]    (KEYS, ROUNDS: 3, BENCH_POOL_SIZE: 64)
//
// 1. node-postgres alone, a pool of 64 with 64 calls in flight: SELECT 1
//    (the round-trip floor), pklimit_allow durable, pklimit_allow with
//    durable => false: the calls themselves, no web framework around them,
//    as pool.query(text, values) sends them (an unnamed statement, parsed
//    and planned for each call) and as named (prepared) statements;
// 2. through Express and express-rate-limit with rate-limit-pklimit, each
//    request's key drawn at random in the app, 64 concurrent requests
//    (autocannon), durable and durable: false, each app after SECONDS of
//    warm-up.
//
// Each path first calls each of its KEYS keys once, 64 at a time (the
// memory path reads them in, the durable path inserts their rows: the
// steady state of a service whose keys come back; bench/keys.sh measures
// the cold start), then ROUNDS rounds of SECONDS each are measured, the
// kinds taking turns in each round; medians are printed.  The driver and
// the app call the same stored keys ('bench-keys:k1' ... for the memory
// path, 'bench-keys:d1' ... for the durable one: a durable call on a key
// in memory takes it out), so 100,000 keys fit the default memory table.
// Start from a fresh server.  The connection is libpq's environment
// (PGHOST, PGPORT, PGUSER, PGDATABASE: a database with pklimit).  The limit
// is far above the calls made: nothing is refused.  Reported, not asserted.
'use strict';

const { fork } = require('node:child_process');

const KEYS = Number(process.env.KEYS || 100000);
const CONNECTIONS = 64;
const POOL_SIZE = Number(process.env.BENCH_POOL_SIZE || 64);
const ROUNDS = Number(process.env.ROUNDS || 3);
// a path's keys: 'k' (memory) or 'd' (durable) and a number; random, or
// each once in turn
const random = (p) => `${p}${1 + Math.floor(Math.random() * KEYS)}`;
let next = 0;
const eachOnce = (p) => (next < KEYS ? `${p}${++next}` : null);
const PREFIX = 'bench-keys:';

const STATEMENTS = {
  select1: ['SELECT 1', null],
  durable: ["SELECT pklimit_allow($1::text, 1000000000, '1 hour')", 'd'],
  memory: ["SELECT pklimit_allow($1::text, 1000000000, '1 hour', durable => false)", 'k'],
};

// calls/s of one statement, CONNECTIONS at a time on a pool of POOL_SIZE;
// with seconds 0, each of the kind's keys once instead
async function driver(kind, seconds) {
  const pg = require('pg');
  const pool = new pg.Pool({ max: POOL_SIZE });
  const [text, p] = STATEMENTS[kind.replace('-named', '')];
  const name = kind.endsWith('-named') ? kind : undefined;
  const args = () => (p ? [PREFIX + random(p)] : []);
  const loop = async (end) => { let n = 0; while (Date.now() < end) { await pool.query({ name, text, values: args() }); n++; } return n; };
  const run = async (s) => (await Promise.all(Array.from({ length: CONNECTIONS },
    () => loop(Date.now() + s * 1000)))).reduce((a, b) => a + b, 0) / s;
  const warm = async () => { for (let k; (k = eachOnce(p)) !== null;) await pool.query(text, [PREFIX + k]); };
  const rate = seconds > 0 ? await run(seconds) : await Promise.all(Array.from({ length: CONNECTIONS }, warm));
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
    keyGenerator: () => random(durable ? 'd' : 'k'),
    store: new PklimitStore({ pool: new pg.Pool({ max: POOL_SIZE }), prefix: PREFIX, anchor: 'epoch', durable }),
  }));
  app.get('/', (req, res) => res.send('ok'));
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
}

function child(args) {
  return fork(__filename, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

function measureDriver(kind, seconds) {
  return new Promise((resolve, reject) => {
    const c = child(['--driver', kind, String(seconds)]);
    c.once('message', (m) => { c.kill(); resolve(m.rate); });
    c.once('exit', (code) => reject(new Error(`${kind} run exited with ${code}`)));
  });
}

// an app of one path, its keys already called by the driver, warmed up
async function startApp(durable, seconds) {
  const autocannon = require('autocannon');
  const c = child(['--serve', durable ? 'durable' : 'memory']);
  const port = await new Promise((resolve, reject) => {
    c.once('message', (m) => resolve(m.port));
    c.once('exit', (code) => reject(new Error(`app exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: CONNECTIONS, duration: seconds });
  return { url, stop: () => { c.removeAllListeners('exit'); c.kill(); } };
}

async function measureApp(app, seconds) {
  const r = await require('autocannon')({ url: app.url, connections: CONNECTIONS, duration: seconds });
  return { rps: r.requests.average, bad: r.non2xx + r.errors };
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function main() {
  const seconds = Number(process.argv[2] || 10);
  const kinds = ['select1', 'durable', 'memory', 'select1-named', 'durable-named', 'memory-named'];
  const rates = Object.fromEntries([...kinds, 'appDurable', 'appMemory'].map((k) => [k, []]));
  await measureDriver('durable', 0);
  await measureDriver('memory', 0);
  for (let i = 0; i < ROUNDS; i++)
    for (const kind of kinds) rates[kind].push(await measureDriver(kind, seconds));
  let bad = 0;
  for (const name of ['appDurable', 'appMemory']) {   // one at a time: max_connections
    const app = await startApp(name === 'appDurable', seconds);
    for (let i = 0; i < ROUNDS; i++) {
      const r = await measureApp(app, seconds);
      rates[name].push(r.rps);
      bad += r.bad;
    }
    app.stop();
  }
  const m = Object.fromEntries(Object.entries(rates).map(([k, v]) => [k, median(v)]));
  const r = (a, b) => (a / b).toFixed(2);
  console.log(`${KEYS} random keys, ${CONNECTIONS} in flight, a pool of ${POOL_SIZE}, after each key once;` +
    ` medians of ${ROUNDS} x ${seconds} s`);
  console.log(`node-postgres alone:  SELECT 1 ${m.select1.toFixed(0)}/s, durable ${m.durable.toFixed(0)}/s,` +
    ` memory ${m.memory.toFixed(0)}/s`);
  console.log(`  memory / durable ${r(m.memory, m.durable)}x, memory / SELECT 1 ${r(m.memory, m.select1)}x,` +
    ` durable / SELECT 1 ${r(m.durable, m.select1)}x`);
  console.log(`  prepared (named statements): SELECT 1 ${m['select1-named'].toFixed(0)}/s,` +
    ` durable ${m['durable-named'].toFixed(0)}/s, memory ${m['memory-named'].toFixed(0)}/s:` +
    ` memory / durable ${r(m['memory-named'], m['durable-named'])}x, memory / SELECT 1` +
    ` ${r(m['memory-named'], m['select1-named'])}x`);
  console.log(`through express-rate-limit: durable ${m.appDurable.toFixed(0)} req/s, memory ${m.appMemory.toFixed(0)}` +
    ` req/s (non-2xx and errors: ${bad}): memory / durable ${r(m.appMemory, m.appDurable)}x`);
}

if (process.argv[2] === '--driver') {
  driver(process.argv[3], Number(process.argv[4]))
    .then((rate) => process.send({ rate }))
    .catch((error) => { console.error(error); process.exit(1); });
} else if (process.argv[2] === '--serve') {
  serve(process.argv[3] === 'durable').catch((error) => { console.error(error); process.exit(1); });
} else {
  main().catch((error) => { console.error(error); process.exit(1); });
}
