// index.d.ts as an application uses it; type-checked by types.test.js.
// Each @ts-expect-error is a use the types must refuse.
import express from 'express';
import { rateLimit, type Store } from 'express-rate-limit';
import pg from 'pg';
import { PklimitStore, pklimitTenant, withTenant, concurrencyLimit, NO_LIMIT, type Anchor, type PklimitLease } from 'rate-limit-pklimit';

const pool = new pg.Pool();
const store = new PklimitStore({
  pool, prefix: 'api', schema: 'Rate Limits', algorithm: 'gcra', anchor: 'epoch', durable: false,
  logger: console, tenant: (key) => key.split('/')[0],
});
const app = express();
app.use(pklimitTenant((req: express.Request) => req.get('x-tenant')));
app.use(pklimitTenant(async (req: express.Request) => req.get('x-tenant') ?? null));
const asStore: Store = store;
app.use(rateLimit({ windowMs: 60_000, limit: 100, store: asStore }));
app.use(rateLimit({ windowMs: 60_000, limit: 5, store: new PklimitStore({ pool: new pg.Client(), prefix: 'login:' }) }));

// a store that names a policy, its limit in the headers
const policyStore = new PklimitStore({ pool, prefix: 'api', policy: 'api', logger: console });
app.use(rateLimit({ windowMs: 60_000, limit: policyStore.policyLimit, store: policyStore }));
const policy: string | undefined = policyStore.policy;

const reset: Promise<void> = withTenant('acme', () => store.resetKey('k'));
const anchor: Anchor = new PklimitStore({ pool }).anchor;
const prefix: string = new PklimitStore({ pool }).prefix;
const largest: string = NO_LIMIT;

// at most 2 exports at once per tenant, a lease of 15 minutes; or a policy's
app.post('/exports', concurrencyLimit({ pool, key: (req: express.Request) => `export:${req.get('x-tenant')}`, max: 2, lease: 15 * 60_000 }));
app.post('/reports', concurrencyLimit({ pool, key: 'reports', policy: 'reports', renewEvery: 60_000, passOnStoreError: true }));
app.post('/jobs', concurrencyLimit({ pool, key: 'jobs', max: 1, lease: '1 hour', statusCode: 503, logger: console }));
app.post('/imports', concurrencyLimit({ pool, key: 'imports', max: 1, lease: 60_000,
  message: async (req: express.Request) => ({ busy: req.path }) }));
app.post('/uploads', concurrencyLimit({ pool, key: 'uploads', max: 4, lease: 60_000,
  handler: async (req: express.Request, res: express.Response) => { res.status(503).end(); } }));
const leaseSeen = (lease: PklimitLease): string | null => lease.token;

// @ts-expect-error the pool is required
new PklimitStore({ prefix: 'api' });
// @ts-expect-error a policy decides max and lease
concurrencyLimit({ pool, key: 'k', policy: 'p', max: 2 });
// @ts-expect-error max and lease are needed without a policy
concurrencyLimit({ pool, key: 'k', max: 2 });
// @ts-expect-error the key is a string or a function
concurrencyLimit({ pool, key: 42, max: 2, lease: 1000 });
// @ts-expect-error an anchor pklimit does not have
new PklimitStore({ pool, anchor: 'midnight' });
// @ts-expect-error an algorithm pklimit does not have
new PklimitStore({ pool, algorithm: 'leaky' });
// @ts-expect-error durable is a boolean
new PklimitStore({ pool, durable: 'false' });
// @ts-expect-error the policy decides the algorithm
new PklimitStore({ pool, policy: 'api', algorithm: 'gcra' });
// @ts-expect-error the policy decides durability
new PklimitStore({ pool, policy: 'api', durable: false });
// @ts-expect-error the policy decides the anchor
new PklimitStore({ pool, policy: 'api', anchor: 'first' });
// @ts-expect-error a policy is named by a string
new PklimitStore({ pool, policy: 42 });
// @ts-expect-error the prefix is the store's own
new PklimitStore({ pool }).prefix = 'x';

export { reset, anchor, prefix, largest, policy, leaseSeen };
