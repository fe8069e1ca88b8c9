#!/usr/bin/env node
// A login handler rate limited with pklimit (node-postgres, "pg" from npm).
//
// Reads attempts from stdin, one "user tenant password" per line (a tenant of
// "-" means no tenant), and prints one line per attempt:
//
//     alice acme wrong -> 401 remaining=4
//     alice acme wrong -> 429 retry_after=900
//     alice acme s3cret -> 200
//
// The connection comes from the usual libpq environment (PGHOST, PGPORT,
// PGDATABASE, PGUSER, ...) or from the DATABASE_URL environment variable.
'use strict';

const crypto = require('node:crypto');
const readline = require('node:readline');
const { Client } = require('pg');

const LIMIT = 5;
const WINDOW = '15 minutes';
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
async function login(client, user, tenant, password) {
  await client.query('BEGIN');
  try {
    // The tenant for this transaction only: set_config(..., true) is
    // SET LOCAL, with the tenant as a bind parameter. It ends with the
    // transaction, so a pooled server connection never carries it over.
    await client.query("SELECT set_config('platformkit.tenant', $1, true)", [tenant]);
    // Count the attempt BEFORE the expensive hash.
    const { rows: [r] } = await client.query(
      'SELECT allowed, remaining, ceil(extract(epoch FROM retry_after))::bigint AS retry_after,' +
      " status FROM pklimit_check('login:' || $1, $2, $3::interval)",
      [user, LIMIT, WINDOW]);
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
      const [user, tenant, password] = fields;
      const result = await login(client, user, tenant === '-' ? '' : tenant, password);
      console.log(`${user} ${tenant} ${password} -> ${describe(result)}`);
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
