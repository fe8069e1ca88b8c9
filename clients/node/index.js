'use strict';

// An express-rate-limit store backed by pklimit: every hit is recorded by
// pklimit outside the caller's transaction, on the database server's clock,
// so the count is exact across app replicas and survives the caller's
// rollback.  durable (the default): committed by pklimit's worker before the
// answer; durable: false, pklimit's memory path: decided in shared memory by
// the calling backend and written to the table within
// pklimit.flush_interval (docs/memory.md).

const { AsyncLocalStorage } = require('node:async_hooks');

// The largest bigint: a max_count that refuses nothing, for a limit that
// express-rate-limit computes per request (the count is the same either way).
const NO_LIMIT = '9223372036854775807';
const ALGORITHMS = ['fixed', 'gcra', 'sliding'];

// The tenant of the request being served, set by pklimitTenant() or
// withTenant(); shared by every store in the process.
const tenantStorage = new AsyncLocalStorage();

// Runs fn with tenant as the pklimit tenant of every store call it makes,
// awaited or not.
function withTenant(tenant, fn) {
  return tenantStorage.run(tenant == null ? '' : String(tenant), fn);
}

// Express middleware: the tenant getTenant(req) names counts every call of
// the rate limiters after it.  null, undefined or '' is no tenant.
function pklimitTenant(getTenant) {
  if (typeof getTenant !== 'function') {
    throw new TypeError('pklimitTenant(getTenant): getTenant must be a function of the request');
  }
  return function pklimitTenantMiddleware(req, res, next) {
    let tenant;
    try {
      tenant = getTenant(req);
    } catch (error) {
      next(error);
      return;
    }
    if (tenant && typeof tenant.then === 'function') {
      tenant.then((t) => withTenant(t, () => next()), next);
      return;
    }
    withTenant(tenant, () => next());
  };
}

function currentTenant() {
  return tenantStorage.getStore() ?? '';
}

function quoteIdent(name) {
  return '"' + String(name).replace(/"/g, '""') + '"';
}

// pg returns bigint as a string; a count past 2^53 is reported as the
// largest safe integer rather than rounded.
function toCount(value) {
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : Number.MAX_SAFE_INTEGER;
}

function toWarn(logger) {
  if (logger == null) return (message) => console.warn(message);
  if (typeof logger === 'function') return logger;
  if (typeof logger.warn === 'function') return (message) => logger.warn(message);
  throw new TypeError('PklimitStore: logger must be a function or an object with a warn method');
}

class PklimitStore {
  constructor(options = {}) {
    const { pool, prefix = 'rl:', schema, algorithm, logger, tenant, durable = true } = options;
    if (!pool || typeof pool.query !== 'function') {
      throw new TypeError('PklimitStore: pool must be a pg.Pool (or a client with a query method)');
    }
    if (algorithm !== undefined && !ALGORITHMS.includes(algorithm)) {
      throw new TypeError(`PklimitStore: algorithm must be one of ${ALGORITHMS.join(', ')}, got ${algorithm}`);
    }
    if (tenant !== undefined && typeof tenant !== 'function') {
      throw new TypeError('PklimitStore: tenant must be a function of the key');
    }
    // a boolean only: the string 'false' would be true
    if (typeof durable !== 'boolean') {
      throw new TypeError(`PklimitStore: durable must be true or false, got ${typeof durable} ${String(durable)}`);
    }
    this.pool = pool;
    this.prefix = String(prefix);
    // Counted in one shared database: a key incremented here is seen by
    // every other store, in this process or another.
    this.localKeys = false;
    this.algorithm = algorithm;
    this.durable = durable;
    this.warn = toWarn(logger);
    this.tenantOf = tenant ?? currentTenant;
    this.window = '60000 milliseconds';
    this.maxCount = NO_LIMIT;
    this.limitIsNumber = false;
    this.keepsRefusals = false;
    this.takesBack = false;
    this.unrecorded = new Map();
    this.buildQueries(schema === undefined || schema === null ? '' : quoteIdent(schema) + '.');
  }

  // Every statement sets the tenant for itself only (set_config(..., true)
  // ends with the statement's implicit transaction) and passes it as a bind
  // parameter: one round trip, nothing left on a pooled connection.  The
  // key flows through the subquery so that the function, which depends on
  // it, runs after set_config; OFFSET 0 keeps the subquery from being
  // flattened away.  No statement is named: named prepared statements do
  // not survive a pooler in transaction mode.  durable => false goes into
  // every pklimit_check (the peek too) and pklimit_decrement, and only when
  // it is false, as algorithm: the default statements are those any pklimit
  // 0.3.0 takes; pklimit_count and pklimit_forget are exact on both paths.
  buildQueries(s) {
    const durable = this.durable ? '' : ', durable => false';
    const tenantAndKey =
      "(SELECT pg_catalog.set_config('platformkit.tenant', $1, true) AS tenant, $2::text AS key OFFSET 0) t";
    const check = (algorithm) =>
      `SELECT c.allowed, c.count, c.reset_at, extract(epoch FROM c.retry_after) * 1000 AS retry_ms, c.status FROM ${tenantAndKey},` +
      ` LATERAL ${s}pklimit_check(t.key, $3::bigint, $4::interval, cost => $5::bigint${durable}` +
      (algorithm ? ', algorithm => $6::text' : '') + ') c';
    this.sql = {
      check: check(false),
      checkAlgorithm: check(true),
      decrement: `SELECT ${s}pklimit_decrement(t.key, 1${durable}) AS count FROM ${tenantAndKey}`,
      forget: `SELECT ${s}pklimit_forget(t.key) AS forgotten FROM ${tenantAndKey}`,
    };
  }

  init(options) {
    if (typeof options.windowMs === 'number' && options.windowMs > 0) {
      this.window = `${Math.round(options.windowMs)} milliseconds`;
    }
    this.limitIsNumber = typeof options.limit === 'number';
    this.limit = this.limitIsNumber ? options.limit : undefined;
    this.maxCount = this.limitIsNumber ? String(Math.max(0, Math.floor(options.limit))) : NO_LIMIT;
    // express-rate-limit takes its own 429 answers back too when it skips
    // failed requests.  A GCRA refusal records at most a full bucket, so
    // taking it back would free room it never took (docs/algorithms.md,
    // "Taking events back").
    this.keepsRefusals = this.limitIsNumber && this.algorithm === 'gcra';
    // only a middleware that takes requests back calls decrement
    this.takesBack = Boolean(options.skipFailedRequests || options.skipSuccessfulRequests);
  }

  // Increments that recorded nothing a decrement could take back (an
  // unavailable answer; a GCRA refusal), per tenant and key: that many of
  // the key's decrements take nothing back.  The middleware takes a request
  // back through the store that counted it, and a key's events are alike,
  // so which decrement is skipped does not matter.
  skipNextDecrement(tenant, key) {
    if (!this.takesBack) return;
    const id = JSON.stringify([tenant, key]);
    this.unrecorded.set(id, (this.unrecorded.get(id) || 0) + 1);
  }

  skipsDecrement(tenant, key) {
    const id = JSON.stringify([tenant, key]);
    const n = this.unrecorded.get(id);
    if (!n) return false;
    if (n === 1) this.unrecorded.delete(id);
    else this.unrecorded.set(id, n - 1);
    return true;
  }

  tenantFor(key) {
    const tenant = this.tenantOf(key);
    return tenant == null ? '' : String(tenant);
  }

  async check(key, cost, tenant = this.tenantFor(key)) {
    // gcra and sliding count against max_count: with a limit computed per
    // request there is none, and their counts would mean nothing.
    const algorithm = this.limitIsNumber ? this.algorithm : undefined;
    const params = [tenant, this.prefix + key, this.maxCount, this.window, cost];
    if (algorithm) params.push(algorithm);
    const { rows } = await this.pool.query(algorithm ? this.sql.checkAlgorithm : this.sql.check, params);
    return rows[0];
  }

  unavailable(what, key, row) {
    this.warn(`rate-limit-pklimit: store unavailable (${row.status}) for ${what} of key ${this.prefix + key}:` +
      ` pklimit.on_unavailable answered ${row.allowed ? 'allow' : 'deny'}`);
  }

  async increment(key) {
    const tenant = this.tenantFor(key);
    const row = await this.check(key, 1, tenant);
    if (row.status !== 'ok' && row.status !== 'shadow') {
      this.unavailable('increment', key, row);
      this.skipNextDecrement(tenant, key);
      // allow: no hits, so the middleware lets the request through whatever
      // the limit; deny: more hits than any limit can allow.
      return { totalHits: row.allowed ? 0 : Number.MAX_SAFE_INTEGER, resetTime: undefined };
    }
    let totalHits = toCount(row.count);
    // pklimit decides; the middleware refuses when totalHits > limit.  With
    // 'fixed' and status 'ok' the two agree already; shadow mode (allowed
    // past the limit), gcra and sliding need the count brought to the side
    // pklimit decided.
    if (this.limitIsNumber) {
      totalHits = row.allowed ? Math.min(totalHits, this.limit) : Math.max(totalHits, this.limit + 1);
    }
    if (this.keepsRefusals && !row.allowed) this.skipNextDecrement(tenant, key);
    // a refusal's Retry-After: when a call would be allowed again, which
    // for gcra and sliding comes before the key is back to zero
    const resetTime = this.limitIsNumber && this.algorithm && this.algorithm !== 'fixed' && !row.allowed
      ? new Date(Date.now() + Number(row.retry_ms)) : new Date(row.reset_at);
    return { totalHits, resetTime };
  }

  async get(key) {
    const row = await this.check(key, 0);
    if (row.status !== 'ok' && row.status !== 'shadow') {
      this.unavailable('get', key, row);
      return undefined;
    }
    const totalHits = toCount(row.count);
    if (totalHits === 0) return undefined;
    return { totalHits, resetTime: new Date(row.reset_at) };
  }

  async decrement(key) {
    const tenant = this.tenantFor(key);
    if (this.skipsDecrement(tenant, key)) return;
    const { rows } = await this.pool.query(this.sql.decrement, [tenant, this.prefix + key]);
    if (rows[0].count === null) {
      this.warn(`rate-limit-pklimit: store unavailable for decrement of key ${this.prefix + key}: nothing taken back`);
    }
  }

  async resetKey(key) {
    const { rows } = await this.pool.query(this.sql.forget, [this.tenantFor(key), this.prefix + key]);
    if (rows[0].forgotten === null) {
      this.warn(`rate-limit-pklimit: store unavailable for reset of key ${this.prefix + key}: the count stays`);
    }
  }
}

module.exports = { PklimitStore, pklimitTenant, withTenant, NO_LIMIT };
