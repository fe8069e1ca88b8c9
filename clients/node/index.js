'use strict';

// An express-rate-limit store backed by pklimit: every hit is recorded by
// pklimit outside the caller's transaction, on the database server's clock,
// so the count is exact across app replicas and survives the caller's
// rollback.  durable (the default): committed by pklimit's worker before the
// answer; durable: false, pklimit's memory path: decided in shared memory by
// the calling backend and written to the table within
// pklimit.flush_interval (docs/memory.md).  With policy, a limit named in
// the database (pklimit 0.4.0's policies) decides each hit instead of the
// limit and window express-rate-limit gives the store.

const { AsyncLocalStorage } = require('node:async_hooks');

// The largest bigint: a max_count that refuses nothing, for a limit that
// express-rate-limit computes per request (the count is the same either way).
const NO_LIMIT = '9223372036854775807';
const ALGORITHMS = ['fixed', 'gcra', 'sliding'];
// Where a fixed window starts: at the key's first event, as
// express-rate-limit's own stores start it, or at a multiple of the window
// from the Unix epoch (pklimit's default for SQL callers).
const ANCHORS = ['first', 'epoch'];
// The pklimit each kind of store needs: durable =>, algorithm => and
// pklimit_decrement came in 0.3.0, anchor => and policies in 0.4.0.
const NEEDS = { base: '0.3.0', anchor: '0.4.0', policy: '0.4.0' };
// What a policy decides for itself: a store that names one takes none.
const POLICY_DECIDES = ['algorithm', 'durable', 'anchor'];
// The longest policy name pklimit takes, in bytes.
const POLICY_NAME_MAX = 63;

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

// The prefix as stored keys begin: itself and one ':'.  A prefix holds no
// ':' but an optional last one, so the first ':' of a stored key ends its
// prefix, and no two prefixes share a stored key (appended as they are,
// 'api' with key 'x:1' and 'apix' with key ':1' would both be 'apix:1').
function keyPrefix(prefix) {
  const stem = String(prefix).replace(/:$/, '');
  if (stem === '' || stem.includes(':')) {
    throw new TypeError(`PklimitStore: prefix must be a name without ':' (one at its end is allowed),` +
      ` got '${prefix}'; try '${stem.replace(/:/g, '-') || 'rl'}:'`);
  }
  return stem + ':';
}

// A key as the database can store it, distinct keys kept distinct: text
// holds no NUL, and a lone surrogate would reach the server as U+FFFD (so
// 'bob\uD800' and 'bob\uDC00' would share a count).  '%', NUL and lone
// surrogates are escaped ('%25', '%00', '%uD800'); every other key is
// stored as it is.  (A key that fails at the server would let a request
// through with passOnStoreError.)
function escapeKey(key) {
  const s = String(key);
  if (!/[%\0\uD800-\uDFFF]/.test(s)) return s;
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length &&
        s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) <= 0xdfff) {
      out += s[i] + s[i + 1];  // a pair: one character, stored as it is
      i++;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      out += '%u' + c.toString(16).toUpperCase();
    } else if (c === 0x25) {
      out += '%25';
    } else if (c === 0) {
      out += '%00';
    } else {
      out += s[i];
    }
  }
  return out;
}

// Versions as pklimit writes them, compared numerically: is a older than b?
function olderThan(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) < (y[i] ?? 0);
  }
  return false;
}

function toWarn(logger) {
  if (logger == null) return (message) => console.warn(message);
  if (typeof logger === 'function') return logger;
  if (typeof logger.warn === 'function') return (message) => logger.warn(message);
  throw new TypeError('PklimitStore: logger must be a function or an object with a warn method');
}

// The store's options: a name it does not know (Durable, windowMS) is a
// mistake that would otherwise be ignored without a word.
const OPTIONS = ['pool', 'prefix', 'schema', 'algorithm', 'anchor', 'logger', 'tenant', 'durable', 'policy'];

function checkOptionNames(options) {
  for (const name of Object.keys(options)) {
    if (OPTIONS.includes(name)) continue;
    const near = OPTIONS.find((o) => o.toLowerCase() === name.toLowerCase());
    throw new TypeError(`PklimitStore: unknown option ${name}` +
      (near ? ` (names are case-sensitive: did you mean ${near}?)` : `; the options are ${OPTIONS.join(', ')}`));
  }
}

// The policy option: a name pklimit can hold, and none of the options the
// policy decides (their defaults are the store's, not the policy's).
function checkPolicy(options) {
  const { policy } = options;
  if (policy === undefined || policy === null) return undefined;
  if (typeof policy !== 'string' || policy === '' || Buffer.byteLength(policy) > POLICY_NAME_MAX) {
    throw new TypeError(`PklimitStore: policy must be the name of a pklimit policy, a string of 1 to` +
      ` ${POLICY_NAME_MAX} bytes, got ${typeof policy === 'string' ? `'${policy}'` : `${typeof policy} ${String(policy)}`}`);
  }
  for (const name of POLICY_DECIDES) {
    if (options[name] !== undefined) {
      throw new TypeError(`PklimitStore: ${name} cannot be given with policy: the policy '${policy}' decides it;` +
        ` leave ${name} out, or set it in the policy (pklimit_policy_set('${policy}', ..., ${name} => ...))`);
    }
  }
  return policy;
}

class PklimitStore {
  constructor(options = {}) {
    checkOptionNames(options);
    const policy = checkPolicy(options);
    const { pool, prefix = 'rl:', schema, algorithm, anchor = 'first', logger, tenant, durable = true } = options;
    if (!pool || typeof pool.query !== 'function') {
      throw new TypeError('PklimitStore: pool must be a pg.Pool (or a client with a query method)');
    }
    if (algorithm !== undefined && !ALGORITHMS.includes(algorithm)) {
      throw new TypeError(`PklimitStore: algorithm must be one of ${ALGORITHMS.join(', ')}, got ${algorithm}`);
    }
    if (!ANCHORS.includes(anchor)) {
      throw new TypeError(`PklimitStore: anchor must be one of ${ANCHORS.join(', ')}, got ${anchor}`);
    }
    if (tenant !== undefined && typeof tenant !== 'function') {
      throw new TypeError('PklimitStore: tenant must be a function of the key');
    }
    // a boolean only: the string 'false' would be true
    if (typeof durable !== 'boolean') {
      throw new TypeError(`PklimitStore: durable must be true or false, got ${typeof durable} ${String(durable)}`);
    }
    this.pool = pool;
    this.prefix = keyPrefix(prefix);
    // Counted in one shared database: a key incremented here is seen by
    // every other store, in this process or another.
    this.localKeys = false;
    this.algorithm = algorithm;
    this.anchor = anchor;
    this.durable = durable;
    this.policy = policy;
    this.schema = schema === undefined || schema === null ? undefined : String(schema);
    this.warn = toWarn(logger);
    this.tenantOf = tenant ?? currentTenant;
    this.window = '60000 milliseconds';
    this.maxCount = NO_LIMIT;
    this.limitIsNumber = false;
    this.keepsRefusals = false;
    this.takesBack = false;
    this.increments = new AsyncLocalStorage();
    // express-rate-limit's limit, as a function of the request: the policy's
    // max_count that the request's increment read (rateLimit({ store, limit:
    // store.policyLimit })), so that the headers show the policy's limit.
    this.policyLimit = () => {
      if (this.policy === undefined) {
        throw new TypeError('PklimitStore: policyLimit is the limit of a policy: give the store the option policy');
      }
      return this.increments.getStore()?.limit ?? 1;
    };
    this.buildQueries();
  }

  // Every statement sets the tenant for itself only (set_config(..., true)
  // ends with the statement's implicit transaction) and passes it as a bind
  // parameter: one round trip, nothing left on a pooled connection.  The
  // key flows through the subquery so that the function, which depends on
  // it, runs after set_config; OFFSET 0 keeps the subquery from being
  // flattened away.  No statement is named: named prepared statements do
  // not survive a pooler in transaction mode.  durable => false goes into
  // every pklimit_check (the peek too) and pklimit_decrement, and only when
  // it is false; algorithm => only with a numeric limit (below); anchor =>
  // 'first' into every pklimit_check of a fixed window, and nothing with
  // anchor 'epoch', pklimit's own default, so that such a store takes any
  // pklimit 0.3.0.  pklimit_count and pklimit_forget are exact on both paths.
  // Every parameter is cast: node-postgres sends them untyped, and pklimit
  // 0.4.0's policy forms (key, policy, cost) make a call of three untyped
  // arguments ambiguous (42725).
  buildQueries() {
    const s = this.schema === undefined ? '' : quoteIdent(this.schema) + '.';
    const tenantAndKey =
      "(SELECT pg_catalog.set_config('platformkit.tenant', $1::text, true) AS tenant, $2::text AS key OFFSET 0) t";
    if (this.policy !== undefined) {
      this.buildPolicyQueries(s, tenantAndKey);
      return;
    }
    // gcra and sliding count against max_count: with a limit computed per
    // request there is none, and their counts would mean nothing.
    this.callAlgorithm = this.limitIsNumber ? this.algorithm : undefined;
    const fixed = this.callAlgorithm === undefined || this.callAlgorithm === 'fixed';
    this.firstAnchored = fixed && this.anchor === 'first';
    this.needs = this.firstAnchored ? NEEDS.anchor : NEEDS.base;
    const durable = this.durable ? '' : ', durable => false';
    const algorithm = this.callAlgorithm ? `, algorithm => '${this.callAlgorithm}'` : '';
    const anchor = this.firstAnchored ? ", anchor => 'first'" : '';
    // opened: under anchor 'first', a window that ends before one started
    // now would is one already open (get reads it when the count is 0)
    this.sql = {
      check: 'SELECT c.allowed, c.count, c.reset_at, extract(epoch FROM c.retry_after) * 1000 AS retry_ms, c.status,' +
        ' c.reset_at < pg_catalog.statement_timestamp() + $4::interval AS opened' +
        ` FROM ${tenantAndKey},` +
        ` LATERAL ${s}pklimit_check(t.key, $3::bigint, $4::interval, cost => $5::bigint${durable}${algorithm}${anchor}) c`,
      decrement: `SELECT ${s}pklimit_decrement(t.key, 1${durable}) AS count FROM ${tenantAndKey}`,
      forget: `SELECT ${s}pklimit_forget(t.key) AS forgotten FROM ${tenantAndKey}`,
    };
  }

  // With policy: the policy forms, $3 the policy's name, cost NULL (the
  // policy's own) for a hit and 0 for a peek.  The statement also reads the
  // policy row the call was decided by (the tenant's override, else the
  // default row; pklimit_policies shows a session no other tenant's): its
  // max_count for the headers, and whether a refusal records something a
  // decrement could take back.
  buildPolicyQueries(s, tenantAndKey) {
    this.callAlgorithm = undefined;
    this.firstAnchored = false;
    this.needs = NEEDS.policy;
    const policyRow = 'LEFT JOIN LATERAL (SELECT p.max_count, p.algorithm, p.record_refused, p.block IS NOT NULL AS blocks' +
      ` FROM ${s}pklimit_policies p WHERE p.name = $3::text AND (p.tenant IS NULL OR p.tenant = NULLIF(t.tenant, ''))` +
      ' ORDER BY p.tenant IS NULL LIMIT 1) p ON true';
    this.sql = {
      check: 'SELECT c.allowed, c.count, c.remaining, c.reset_at,' +
        ' extract(epoch FROM c.retry_after) * 1000 AS retry_ms, c.status,' +
        ' p.max_count, p.algorithm, p.record_refused, p.blocks' +
        ` FROM ${tenantAndKey}` +
        ` CROSS JOIN LATERAL ${s}pklimit_check(t.key, $3::text, $4::bigint) c ${policyRow}`,
      decrement: `SELECT ${s}pklimit_decrement(t.key, $3::text) AS count FROM ${tenantAndKey}`,
      forget: `SELECT ${s}pklimit_forget(t.key, $3::text) AS forgotten FROM ${tenantAndKey}`,
    };
  }

  init(options) {
    if (typeof options.windowMs === 'number' && options.windowMs > 0) {
      this.window = `${Math.round(options.windowMs)} milliseconds`;
    }
    this.limitIsNumber = typeof options.limit === 'number';
    this.limit = this.limitIsNumber ? options.limit : undefined;
    // a limit past the largest bigint (Infinity, 2 ** 63) refuses nothing
    this.maxCount = !this.limitIsNumber || !(options.limit < 2 ** 63) ? NO_LIMIT
      : String(Math.max(0, Math.floor(options.limit)));
    // express-rate-limit takes its own 429 answers back too when it skips
    // failed requests.  A GCRA refusal records at most a full bucket, so
    // taking it back would free room it never took (docs/algorithms.md,
    // "Taking events back").
    this.keepsRefusals = this.limitIsNumber && this.algorithm === 'gcra';
    // only a middleware that takes requests back calls decrement
    this.takesBack = Boolean(options.skipFailedRequests || options.skipSuccessfulRequests);
    this.buildQueries();
  }

  // express-rate-limit hands the store only the key, but calls increment
  // and, once the response is known, decrement of one request in that
  // request's async context.  An increment enters a note into it before
  // its first await, so that the rest of the request carries the note; an
  // increment that recorded nothing a decrement could take back (an
  // unavailable answer, a GCRA refusal) marks it, and the decrement of
  // that request, and of no other, takes nothing back.  With policy, the
  // note also carries the policy's limit to policyLimit, which
  // express-rate-limit calls after the increment.  The note lives and dies
  // with the request: nothing is kept per key.
  noteIncrement(tenant, key) {
    if (!this.takesBack && this.policy === undefined) return undefined;
    const note = { tenant, key, recorded: true, spent: false, limit: undefined };
    this.increments.enterWith(note);
    return note;
  }

  // Is this decrement that of an increment of the same request which
  // recorded nothing?  A note answers for one decrement.
  recordedNothing(tenant, key) {
    const note = this.increments.getStore();
    if (note === undefined || note.spent || note.tenant !== tenant || note.key !== key) return false;
    note.spent = true;
    return !note.recorded;
  }

  tenantFor(key) {
    const tenant = this.tenantOf(key);
    return tenant == null ? '' : String(tenant);
  }

  // Runs one of the store's statements.  SQLSTATE 42883 (or 3F000, of the
  // schema option; or 42P01, pklimit_policies missing) means that pklimit is not where the store looks, or is
  // older than the statement: said so, with what to do.
  async query(text, params) {
    try {
      return await this.pool.query(text, params);
    } catch (error) {
      if (error?.code !== '42883' && !(error?.code === '3F000' && this.schema !== undefined) &&
          !(error?.code === '42P01' && this.policy !== undefined)) throw error;
      throw (await this.missing(error)) ?? error;
    }
  }

  async missing(error) {
    let found;
    try {
      ({ rows: [found] } = await this.pool.query(
        "SELECT pg_catalog.current_database() AS db, e.extversion AS version, n.nspname AS schema," +
        ' n.nspname = ANY (pg_catalog.current_schemas(false)) AS on_path' +
        " FROM (SELECT 1) one LEFT JOIN pg_catalog.pg_extension e ON e.extname = 'pklimit'" +
        ' LEFT JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace'));
    } catch {
      return undefined;
    }
    const db = quoteIdent(found.db);
    let what;
    if (found.version === null) {
      what = `pklimit is not installed in database ${db}: run CREATE EXTENSION pklimit in it` +
        " (with pklimit in shared_preload_libraries), or give the store a pool on the database that has it";
    } else if (this.schema !== undefined ? found.schema !== this.schema : !found.on_path) {
      what = `pklimit is installed in schema ${quoteIdent(found.schema)} of database ${db},` +
        (this.schema !== undefined ? ` not in ${quoteIdent(this.schema)}` : ' which is not on the search_path') +
        `: pass schema: ${JSON.stringify(found.schema)} to PklimitStore`;
    } else if (olderThan(found.version, this.needs)) {
      const anchored = this.policy === undefined && this.needs === NEEDS.anchor;
      what = `pklimit ${found.version} in database ${db} is older than this store needs (${this.needs}` +
        (anchored ? ", for anchor 'first'" : this.policy !== undefined ? ', for policy' : '') +
        '): run ALTER EXTENSION pklimit UPDATE in it' +
        (anchored && !olderThan(found.version, NEEDS.base) ? ", or pass anchor: 'epoch'" : '');
    } else {
      return undefined;
    }
    const wrapped = new Error(`rate-limit-pklimit: ${what} (${error.message})`, { cause: error });
    wrapped.code = error.code;
    return wrapped;
  }

  storedKey(key) {
    return this.prefix + escapeKey(key);
  }

  // With policy, cost null is the policy's cost.
  async check(key, cost, tenant = this.tenantFor(key)) {
    const { rows } = await this.query(this.sql.check, this.policy === undefined
      ? [tenant, this.storedKey(key), this.maxCount, this.window, cost]
      : [tenant, this.storedKey(key), this.policy, cost]);
    return rows[0];
  }

  // The parameters of decrement's and forget's statements on key.
  params(tenant, key) {
    return this.policy === undefined ? [tenant, this.storedKey(key)] : [tenant, this.storedKey(key), this.policy];
  }

  unavailable(what, key, row) {
    this.warn(`rate-limit-pklimit: store unavailable (${row.status}) for ${what} of key ${this.storedKey(key)}:` +
      ` pklimit.on_unavailable answered ${row.allowed ? 'allow' : 'deny'}`);
  }

  async increment(key) {
    const tenant = this.tenantFor(key);
    const note = this.noteIncrement(tenant, key);
    const row = await this.check(key, this.policy === undefined ? 1 : null, tenant);
    if (this.policy !== undefined && note) note.limit = this.policyLimitOf(row);
    if (row.status !== 'ok' && row.status !== 'shadow') {
      this.unavailable('increment', key, row);
      if (note) note.recorded = false;
      // allow: no hits, so the middleware lets the request through whatever
      // the limit; deny: more hits than any limit can allow.
      return { totalHits: row.allowed ? 0 : Number.MAX_SAFE_INTEGER, resetTime: undefined };
    }
    if (this.policy !== undefined) return this.policyAnswer(row, note);
    let totalHits = toCount(row.count);
    // pklimit decides; the middleware refuses when totalHits > limit.  With
    // 'fixed' and status 'ok' the two agree already; shadow mode (allowed
    // past the limit), gcra and sliding need the count brought to the side
    // pklimit decided.
    if (this.limitIsNumber) {
      totalHits = row.allowed ? Math.min(totalHits, this.limit) : Math.max(totalHits, this.limit + 1);
    }
    if (note && this.keepsRefusals && !row.allowed) note.recorded = false;
    // a refusal's Retry-After: when a call would be allowed again, which
    // for gcra and sliding comes before the key is back to zero
    const resetTime = this.callAlgorithm && this.callAlgorithm !== 'fixed' && !row.allowed
      ? new Date(Date.now() + Number(row.retry_ms)) : new Date(row.reset_at);
    return { totalHits, resetTime };
  }

  // The limit express-rate-limit compares with under a policy: its own
  // when a number, else (policyLimit, or a function of its own) the
  // policy's max_count, read with the answer; failing that (the row
  // changed between the two), the one the answer implies.
  policyLimitOf(row) {
    if (this.limitIsNumber) return this.limit;
    if (row.max_count !== null && row.max_count !== undefined) return toCount(row.max_count);
    return row.count === null ? 1 : toCount(row.count) + toCount(row.remaining);
  }

  // An answer under a policy, which decided it whatever express-rate-limit's
  // limit: totalHits on the side pklimit decided, such that the
  // middleware's remaining (limit - totalHits) is pklimit's remaining.  A
  // refusal the policy's shadow mode let through is at the limit
  // (remaining 0, no 429).  Under gcra, or with record_refused false, a
  // refusal left nothing for a decrement to take back.
  policyAnswer(row, note) {
    const limit = note?.limit ?? this.policyLimitOf(row);
    let totalHits;
    if (!row.allowed) totalHits = limit + 1;
    else if (row.status === 'shadow') totalHits = limit;
    else totalHits = Math.max(limit - toCount(row.remaining), 1);
    const refused = !row.allowed || row.status === 'shadow';
    if (note && refused && (row.algorithm === 'gcra' || row.record_refused === false)) note.recorded = false;
    // a refusal's Retry-After: when a call would be allowed again, which is
    // the window's end only for a fixed window without block
    const resetTime = !row.allowed && (row.algorithm !== 'fixed' || row.blocks)
      ? new Date(Date.now() + Number(row.retry_ms)) : new Date(row.reset_at);
    return { totalHits, resetTime };
  }

  // The key's hits and reset time, as express-rate-limit's MemoryStore
  // answers them: undefined for a key without an open window, 0 hits for
  // one whose hits were all taken back (seen only of a window anchored at
  // its first event: an epoch-aligned one reads the same either way).
  // Under a policy, whose window the store does not know, 0 hits is
  // undefined.
  async get(key) {
    const row = await this.check(key, 0);
    if (row.status !== 'ok' && row.status !== 'shadow') {
      this.unavailable('get', key, row);
      return undefined;
    }
    const totalHits = toCount(row.count);
    if (totalHits === 0 && !(this.firstAnchored && row.opened)) return undefined;
    return { totalHits, resetTime: new Date(row.reset_at) };
  }

  async decrement(key) {
    const tenant = this.tenantFor(key);
    if (this.recordedNothing(tenant, key)) return;
    const { rows } = await this.query(this.sql.decrement, this.params(tenant, key));
    if (rows[0].count === null) {
      this.warn(`rate-limit-pklimit: store unavailable for decrement of key ${this.storedKey(key)}: nothing taken back`);
    }
  }

  async resetKey(key) {
    const { rows } = await this.query(this.sql.forget, this.params(this.tenantFor(key), key));
    if (rows[0].forgotten === null) {
      this.warn(`rate-limit-pklimit: store unavailable for reset of key ${this.storedKey(key)}: the count stays`);
    }
  }
}

// --- concurrencyLimit: at most max requests at once per key (pklimit's
// leases, docs/leases.md).  A lease is acquired before the handler, renewed
// while the response runs and released once, when the response finishes or
// its connection closes, a handler that throws included.  No queue: a
// request that finds none free is answered 429 with Retry-After.
const LIMIT_OPTIONS = ['pool', 'key', 'max', 'lease', 'policy', 'schema', 'tenant', 'renewEvery',
  'statusCode', 'message', 'handler', 'logger', 'passOnStoreError'];

// A lease length as pklimit takes it: milliseconds, or an interval string.
function leaseInterval(lease) {
  if (typeof lease === 'number' && Number.isFinite(lease) && lease > 0) return `${Math.ceil(lease)} milliseconds`;
  if (typeof lease === 'string' && lease.trim() !== '') return lease;
  throw new TypeError(`concurrencyLimit: lease must be a number of milliseconds or an interval string, got ${String(lease)}`);
}

function concurrencyLimit(options = {}) {
  for (const name of Object.keys(options)) {
    if (!LIMIT_OPTIONS.includes(name)) {
      throw new TypeError(`concurrencyLimit: unknown option ${name}; the options are ${LIMIT_OPTIONS.join(', ')}`);
    }
  }
  const {
    pool, key, max, lease, policy, schema, tenant, renewEvery,
    statusCode = 429, message = 'Too many requests at once, please try again later.',
    handler, logger, passOnStoreError = false,
  } = options;
  if (!pool || typeof pool.query !== 'function') {
    throw new TypeError('concurrencyLimit: pool must be a pg.Pool (or a client with a query method)');
  }
  if (typeof key !== 'function' && typeof key !== 'string') {
    throw new TypeError('concurrencyLimit: key must be a string or a function of the request');
  }
  if (policy !== undefined) {
    if (typeof policy !== 'string' || policy === '' || Buffer.byteLength(policy) > POLICY_NAME_MAX) {
      throw new TypeError(`concurrencyLimit: policy must be a pklimit policy's name, got ${String(policy)}`);
    }
    if (max !== undefined || lease !== undefined) {
      throw new TypeError(`concurrencyLimit: max and lease cannot be given with policy: the policy '${policy}' decides them`);
    }
  } else if (!Number.isInteger(max) || max < 0 || max > 1000) {
    throw new TypeError(`concurrencyLimit: max must be an integer from 0 to 1000, got ${String(max)}`);
  }
  const interval = policy === undefined ? leaseInterval(lease) : undefined;
  // renew a third of the way through the lease (its length is read from
  // the acquire), or every renewEvery
  const renewMs = renewEvery;
  if (renewMs !== undefined && !(Number.isFinite(renewMs) && renewMs > 0)) {
    throw new TypeError(`concurrencyLimit: renewEvery must be a positive number of milliseconds, got ${String(renewEvery)}`);
  }
  if (tenant !== undefined && typeof tenant !== 'function') {
    throw new TypeError('concurrencyLimit: tenant must be a function of the request');
  }
  const warn = toWarn(logger);
  const s = schema === undefined || schema === null ? '' : quoteIdent(schema) + '.';
  // as the store's statements: the tenant set for the statement alone, each
  // parameter cast, no named statement
  const tenantAndKey =
    "(SELECT pg_catalog.set_config('platformkit.tenant', $1::text, true) AS tenant, $2::text AS key OFFSET 0) t";
  // the lease's length, to renew by (a policy's read back once acquired)
  const leaseMs = policy === undefined ? 'extract(epoch FROM $4::interval) * 1000' :
    `(SELECT extract(epoch FROM l.expires_at - l.acquired_at) * 1000 FROM ${s}pklimit_leases(t.key) l` +
    ' WHERE l.token = a.token)';
  const acquire = 'SELECT a.token, a.held, a.max_concurrent, a.status,' +
    ` ceil(extract(epoch FROM a.retry_after))::int AS retry_after, ${leaseMs} AS lease_ms` +
    ` FROM ${tenantAndKey}, LATERAL ` +
    (policy === undefined ? `${s}pklimit_acquire_check(t.key, $3::bigint, $4::interval) a`
      : `${s}pklimit_acquire_check(t.key, $3::text) a`);
  const renewSql = `SELECT ${s}pklimit_renew(t.key, $3::uuid) AS renewed FROM ${tenantAndKey}`;
  const releaseSql = `SELECT ${s}pklimit_release(t.key, $3::uuid) AS released FROM ${tenantAndKey}`;

  // The refusal, as express-rate-limit answers one: statusCode, and the
  // message (or what a function of the request makes of it).
  const refuse = async (req, res) => {
    res.status(statusCode);
    const body = typeof message === 'function' ? await message(req, res) : message;
    if (!res.writableEnded) res.send(body);
  };

  return async function concurrencyLimitMiddleware(req, res, next) {
    // Listened for from the start: a client gone while the acquire was
    // under way has its lease released as soon as the acquire answers.
    let ended = false;
    let release;
    const end = () => {
      if (ended) return;
      ended = true;
      if (release !== undefined) release();
    };
    res.once('finish', end);
    res.once('close', end);
    let k;
    let t;
    let row;
    try {
      k = escapeKey(typeof key === 'function' ? await key(req) : key);
      t = tenant !== undefined ? (await tenant(req)) ?? '' : currentTenant();
      const params = policy === undefined ? [String(t), k, max, interval] : [String(t), k, policy];
      row = (await pool.query(acquire, params)).rows[0];
    } catch (error) {
      if (passOnStoreError) {
        warn(`concurrencyLimit: the lease could not be acquired, so the request goes on: ${error.message}`);
        next();
      } else {
        next(error);
      }
      return;
    }
    req.pklimitLease = { token: row.token, held: row.held === null ? null : toCount(row.held),
      max: toCount(row.max_concurrent), status: row.status };
    if (row.status !== 'ok' && row.status !== 'shadow') {
      warn(`concurrencyLimit: store unavailable (${row.status}) for the lease on '${k}':` +
        ` pklimit.on_unavailable answered ${row.token === null ? 'deny' : 'allow'}`);
    }
    if (row.token === null) {
      if (ended) return;
      if (row.retry_after !== null) res.set('Retry-After', String(Math.max(1, row.retry_after)));
      await (handler ?? refuse)(req, res, next, options);
      return;
    }
    // a token with another status is no lease (shadow mode, or the store
    // unreachable and pklimit.on_unavailable = allow): nothing to renew, but
    // it is released all the same, since an acquire whose answer came too
    // late may still have granted it
    const every = row.status !== 'ok' ? undefined :
      renewMs ?? (row.lease_ms !== null ? Number(row.lease_ms) / 3 : undefined);
    const params = [String(t), k, row.token];
    let timer;
    // called once: by end(), or here if the response ended first
    release = () => {
      if (timer !== undefined) clearInterval(timer);
      pool.query(releaseSql, params).catch((error) =>
        warn(`concurrencyLimit: the lease on '${k}' could not be released (it ends by itself): ${error.message}`));
    };
    if (ended) {
      release();
      return;
    }
    if (every !== undefined) {
      // (setInterval takes at most 2^31 - 1 ms)
      timer = setInterval(() => {
        pool.query(renewSql, params).then((r) => {
          if (ended) return;
          if (r.rows[0].renewed === false) {
            warn(`concurrencyLimit: the lease on '${k}' ended before the response did; it is no longer counted`);
          } else if (r.rows[0].renewed === null) {
            warn(`concurrencyLimit: the lease on '${k}' could not be renewed: the store was unavailable`);
          }
        }, (error) => warn(`concurrencyLimit: the lease on '${k}' could not be renewed: ${error.message}`));
      }, Math.min(Math.max(every, 1), 2 ** 31 - 1));
      timer.unref();
    }
    next();
  };
}

module.exports = { PklimitStore, pklimitTenant, withTenant, concurrencyLimit, NO_LIMIT };
