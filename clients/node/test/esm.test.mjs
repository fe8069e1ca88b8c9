// The package imported from ESM, by its name, as an application would.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import PklimitStoreDefault, { PklimitStore, pklimitTenant, withTenant, concurrencyLimit } from 'rate-limit-pklimit';

test('ESM import gives the same exports as require', () => {
  const cjs = createRequire(import.meta.url)('rate-limit-pklimit');
  assert.equal(PklimitStore, cjs.PklimitStore);
  assert.equal(PklimitStoreDefault, cjs, 'the default export is module.exports');
  assert.equal(typeof pklimitTenant, 'function');
  assert.equal(typeof withTenant, 'function');
  assert.equal(concurrencyLimit, cjs.concurrencyLimit);
});
