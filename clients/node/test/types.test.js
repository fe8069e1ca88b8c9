'use strict';
// index.d.ts type-checks with express-rate-limit's, express's and pg's
// types, as an application uses it, and refuses what the store refuses
// (types.ts, with TypeScript from the lockfile).

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');

test('index.d.ts type-checks as an application uses it (tsc --noEmit)', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const run = spawnSync(process.execPath, [tsc, '-p', path.join(__dirname, 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(run.status, 0, `tsc:\n${run.stdout}${run.stderr}`);
});
