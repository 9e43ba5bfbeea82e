// The package as an ES module and its TypeScript declarations, as installed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

import cjs from 'redlock-agent-client';
import { Client, LockLostError, semaphorePath, electionPath, multiPath } from 'redlock-agent-client';

const require = createRequire(import.meta.url);

test('import gives the same classes as require', () => {
  assert.equal(Client, require('redlock-agent-client').Client);
  assert.equal(LockLostError, cjs.LockLostError);
  assert.equal(semaphorePath('a b/c', 'acquire'), '/v1/semaphores/a%20b%2Fc/acquire');
  assert.equal(electionPath("x'y"), '/v1/elections/x%27y');
  assert.equal(multiPath('acquire'), '/v1/locks/acquire');
});

test('the declarations ship with the package and name every export', () => {
  const root = path.dirname(require.resolve('redlock-agent-client/package.json'));
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const dts = fs.readFileSync(path.join(root, pkg.types), 'utf8');
  for (const name of Object.keys(cjs)) {
    assert.match(dts, new RegExp(`export (class|function|const) ${name}\\b`), name);
  }
  assert.deepEqual(pkg.dependencies || {}, {});
});
