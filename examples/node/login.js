#!/usr/bin/env node
// A login handler rate limited with pklimit (node-postgres, "pg" from npm).
//
// Reads attempts from stdin, one "user tenant address password" per line (a
// tenant of "-" means no tenant), and prints one line per attempt:
//
//     alice acme 10.0.0.1 wrong -> 401 remaining=4
//     alice acme 10.0.0.1 wrong -> 429 retry_after=900
//     alice acme 10.0.0.1 s3cret -> 200
//
// Two limits guard a login, checked and recorded together in one
// pklimit_check_all call: 5 attempts per account per 15 minutes, and 8 per
// source address per hour (credential stuffing tries many accounts from one
// address).
//
// The connection comes from the usual libpq environment (PGHOST, PGPORT,
// PGDATABASE, PGUSER, ...) or from the DATABASE_URL environment variable.
'use strict';

const crypto = require('node:crypto');
const readline = require('node:readline');
const { Client } = require('pg');

const ACCOUNT_LIMIT = 5;
const ACCOUNT_WINDOW = '15 minutes';
const ADDRESS_LIMIT = 8;
const ADDRESS_WINDOW = '1 hour';
const SALT = 'pklimit-example';

// Deliberately slow, as a password hash should be (PBKDF2-SHA256).
function fakeHash(password) {
  return crypto.pbkdf2Sync(password, SALT, 10000, 32, 'sha256');
}

// A fake user table: user -> password hash.
const USERS = new Map([
  ['alice', fakeHash('s3cret')],
  ['bob', fakeHash('hunter2')],
]);

// One request: resolves to { status, headers }.
async function login(client, user, tenant, address, password) {
  await client.query('BEGIN');
  try {
    // The tenant for this transaction only: set_config(..., true) is
    // SET LOCAL, with the tenant as a bind parameter. It ends with the
    // transaction, so a pooled server connection never carries it over.
    await client.query("SELECT set_config('platformkit.tenant', $1, true)", [tenant]);
    // Count the attempt BEFORE the expensive hash: both limits in one call.
    const { rows: [r] } = await client.query(
      'SELECT bool_and(allowed) AS allowed, min(remaining) AS remaining,' +
      ' ceil(extract(epoch FROM max(retry_after)))::bigint AS retry_after, min(status) AS status' +
      " FROM pklimit_check_all(ARRAY['login:' || $1, 'ip:' || $2]," +
      ' ARRAY[$3::bigint, $4::bigint], ARRAY[$5::interval, $6::interval])',
      [user, address, ACCOUNT_LIMIT, ADDRESS_LIMIT, ACCOUNT_WINDOW, ADDRESS_WINDOW]);
    const headers = {};
    if (r.remaining !== null) headers['RateLimit-Remaining'] = String(r.remaining);
    if (r.status !== 'ok') headers['X-RateLimit-Status'] = r.status;
    let status;
    if (!r.allowed) {
      if (r.retry_after !== null) headers['Retry-After'] = String(r.retry_after);
      status = 429;
    } else {
      const stored = USERS.get(user);
      const supplied = fakeHash(password);
      if (stored !== undefined && crypto.timingSafeEqual(stored, supplied)) {
        await client.query("SELECT pklimit_forget('login:' || $1)", [user]);
        await client.query('COMMIT');
        return { status: 200, headers: {} };
      }
      status = 401;
    }
    await client.query('COMMIT');
    return { status, headers };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

function describe({ status, headers }) {
  let line;
  if (status === 429) return `429 retry_after=${headers['Retry-After'] ?? 'unknown'}`;
  if (status === 401) line = `401 remaining=${headers['RateLimit-Remaining'] ?? 'unknown'}`;
  else line = String(status);
  if (headers['X-RateLimit-Status']) line += ` status=${headers['X-RateLimit-Status']}`;
  return line;
}

async function main() {
  // node-postgres uses only the unnamed prepared statement unless a query is
  // given a name, so this also works behind pgbouncer's transaction pooling.
  const client = new Client(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {});
  await client.connect();
  try {
    const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of rl) {
      const fields = line.trim().split(/\s+/).filter(Boolean);
      if (fields.length === 0) continue;
      const [user, tenant, address, password] = fields;
      const result = await login(client, user, tenant === '-' ? '' : tenant, address, password);
      console.log(`${user} ${tenant} ${address} ${password} -> ${describe(result)}`);
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
