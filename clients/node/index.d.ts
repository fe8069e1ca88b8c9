import type { ClientRateLimitInfo, Options, Store } from 'express-rate-limit';

/** Anything with pg's promise `query(text, values)`: a `pg.Pool` or a `pg.Client`. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

export type Algorithm = 'fixed' | 'gcra' | 'sliding';

/** Where a fixed window starts: at the key's first hit, or aligned to the Unix epoch. */
export type Anchor = 'first' | 'epoch';

/** The options of every store. */
export interface PklimitCommonOptions {
  /** Where pklimit is installed: a `pg.Pool` (or a client). Never ended by the store. */
  pool: Queryable;
  /**
   * Begins every stored key (default `'rl:'`), followed by one `':'` and the key; give each
   * limiter its own. A name without `':'`, or with one at its end only (`'login'` and
   * `'login:'` are the same prefix): any other is refused.
   */
  prefix?: string;
  /** The schema pklimit is installed in, if it is not on the search_path. */
  schema?: string;
  /** Where warnings go when the store cannot be reached (default `console.warn`). */
  logger?: ((message: string) => void) | { warn(message: string): void };
  /** The tenant of a call; default: the one `pklimitTenant()` or `withTenant()` set. */
  tenant?: (key: string) => string | null | undefined;
}

/** A store whose limit is express-rate-limit's `limit` and `windowMs`. */
export interface LimitOptions extends PklimitCommonOptions {
  policy?: undefined | null;
  /** pklimit's algorithm (default `'fixed'`); used only when `limit` is a number. */
  algorithm?: Algorithm;
  /**
   * Where a fixed window starts (default `'first'`): `'first'`, at the key's first hit, as
   * express-rate-limit's MemoryStore starts it (`anchor => 'first'`, pklimit 0.4.0); `'epoch'`,
   * at a multiple of `windowMs` from the Unix epoch, every key's window at once. Fixed windows
   * only: `gcra` and `sliding` have no such start.
   */
  anchor?: Anchor;
  /**
   * `durable =>` of every `pklimit_check` and `pklimit_decrement` (default `true`):
   * `true`, each hit is committed before its answer; `false`, pklimit's memory path:
   * decided in shared memory, as exact, written to the table within
   * `pklimit.flush_interval`, and a crash may lose the last 2 × `pklimit.flush_interval`
   * of hits. A boolean only.
   */
  durable?: boolean;
}

/**
 * A store that names a pklimit policy (pklimit 0.4.0): the policy in the database decides each
 * hit, its limit, window, algorithm, cost, durability and anchor, and a change to it applies
 * to the next request. express-rate-limit's `windowMs` is not sent, nor its `limit`: pass
 * `limit: store.policyLimit` so that the headers show the policy's limit.
 */
export interface PolicyOptions extends PklimitCommonOptions {
  /** The policy's name (1 to 63 bytes), as `pklimit_policy_set` made it. */
  policy: string;
  /** The policy's: refused with `policy`. */
  algorithm?: never;
  /** The policy's: refused with `policy`. */
  anchor?: never;
  /** The policy's: refused with `policy`. */
  durable?: never;
}

export type PklimitStoreOptions = LimitOptions | PolicyOptions;

export declare class PklimitStore implements Store {
  constructor(options: PklimitStoreOptions);
  readonly localKeys: false;
  /** The prefix as stored keys begin: the option, ending in its `':'`. */
  readonly prefix: string;
  /** The `anchor` option. */
  readonly anchor: Anchor;
  /** The `durable` option: `false` is pklimit's memory path. */
  readonly durable: boolean;
  /** The `policy` option: the policy that decides each hit, if any. */
  readonly policy: string | undefined;
  /**
   * express-rate-limit's `limit` for a store with `policy`: the policy's `max_count` as the
   * request's increment read it (`rateLimit({ store, limit: store.policyLimit })`).
   */
  readonly policyLimit: (request?: unknown, response?: unknown) => number;
  init(options: Options): void;
  increment(key: string): Promise<ClientRateLimitInfo>;
  get(key: string): Promise<ClientRateLimitInfo | undefined>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
}

/** Express middleware: the tenant `getTenant(req)` names counts every later store call of the request. */
export declare function pklimitTenant<Req = any>(
  getTenant: (req: Req) => string | null | undefined | Promise<string | null | undefined>,
): (req: Req, res: unknown, next: (error?: unknown) => void) => void;

/** Runs `fn` with `tenant` as the pklimit tenant of every store call it makes. */
export declare function withTenant<T>(tenant: string | null | undefined, fn: () => T): T;

/** The largest bigint, passed as max_count when `limit` is a function. */
export declare const NO_LIMIT: string;

/** What `concurrencyLimit` leaves on the request: the lease it acquired, or why none. */
export interface PklimitLease {
  /** The lease's token; `null` when refused. A token with `status` other than `'ok'` is no lease. */
  token: string | null;
  /** Live leases on the key after the acquire; `null` when the store could not be reached. */
  held: number | null;
  /** The key's `max_concurrent`. */
  max: number;
  /** `'ok'`, `'shadow'`, or why the store could not be reached (`'timeout'`, ...). */
  status: string;
}

interface ConcurrencyCommon<Req> {
  /** A pg.Pool (or a client with a query method). */
  pool: { query: (...args: any[]) => Promise<any> };
  /** The key whose leases count: a string, or a function of the request. */
  key: string | ((req: Req) => string | Promise<string>);
  /** The schema pklimit is installed in, if not on the search_path. */
  schema?: string;
  /** The request's tenant; by default the one `pklimitTenant` or `withTenant` set. */
  tenant?: (req: Req) => string | null | undefined | Promise<string | null | undefined>;
  /** Milliseconds between renewals while the response runs; default a third of the lease. */
  renewEvery?: number;
  /** The refusal's status (default 429). */
  statusCode?: number;
  /** The refusal's body, or a function of the request that makes it (as express-rate-limit's). */
  message?: unknown | ((req: Req, res: any) => unknown | Promise<unknown>);
  /** Answers a refused request instead (the `Retry-After` header is set). */
  handler?: (req: Req, res: any, next: (error?: unknown) => void, options: unknown) => void | Promise<void>;
  /** Where warnings go (a function, or an object with `warn`); default `console.warn`. */
  logger?: ((message: string) => void) | { warn: (message: string) => void };
  /** A store error lets the request through with a warning, instead of passing the error on. */
  passOnStoreError?: boolean;
}

export interface ConcurrencyLimitOptions<Req = any> extends ConcurrencyCommon<Req> {
  /** At most this many requests at once per key (0 to 1000). */
  max: number;
  /** The lease: milliseconds, or an interval string (`'15 minutes'`). */
  lease: number | string;
  policy?: never;
}

export interface ConcurrencyPolicyOptions<Req = any> extends ConcurrencyCommon<Req> {
  /** A pklimit policy: its `max_count` is `max`, its `window` the lease. */
  policy: string;
  max?: never;
  lease?: never;
}

/**
 * Express middleware: at most `max` requests at once per key, with pklimit's leases. Acquires
 * before the handler, answers 429 with `Retry-After` when none is free, renews while the
 * response runs, and releases when it finishes or its connection closes. No queue of waiters.
 */
export declare function concurrencyLimit<Req = any>(
  options: ConcurrencyLimitOptions<Req> | ConcurrencyPolicyOptions<Req>,
): (req: Req, res: any, next: (error?: unknown) => void) => Promise<void>;
