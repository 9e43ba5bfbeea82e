'use strict';
// Read-write locks (`mode: 'shared'`) against a real agent on three real
// redis-server masters (`redlock-agent dev`), through the package as
// installed.

const { test, before, beforeEach, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const { Client, TakenError, UnreachableError } = require('redlock-agent-client');
const { waitFor, start, stop } = require('./support.js');

let agent;
let client;

before(async () => {
  agent = await start();
  client = agent.client;
});

beforeEach(async () => {
  await waitFor('a usable quorum', async () => (await client.nodes()).available);
});

after(() => stop(agent));

test('two shared holds are granted at once, and the listing names both readers', async () => {
  const first = await client.hold('js-shared', { mode: 'shared', ttlMs: 10000, owner: 'reader-1' });
  try {
    const second = await client.hold('js-shared', { mode: 'shared', ttlMs: 10000, waitMs: 0, owner: 'reader-2' });
    try {
      assert.equal(first.mode, 'shared');
      assert.equal(second.mode, 'shared');
      assert.notEqual(first.token, second.token);
      const listed = (await client.locks()).locks.find((l) => l.resource === 'js-shared');
      assert.ok(listed, 'the lock is listed');
      assert.equal(listed.mode, 'shared');
      assert.deepEqual(listed.readers.map((r) => r.owner).sort(), ['reader-1', 'reader-2']);
      assert.ok(listed.readers.every((r) => r.held_here === true && r.masters >= 2), JSON.stringify(listed.readers));
    } finally {
      second.close();
    }
  } finally {
    first.close();
  }
  // Both closed: a writer gets the lock (the releases may take a moment).
  const writer = await client.acquire('js-shared', { ttlMs: 10000, waitMs: 5000 });
  assert.equal(writer.mode, 'exclusive');
  assert.equal(await client.release('js-shared', writer.token), true);
});

test('an exclusive acquire is taken while a shared grant is held', async () => {
  const reader = await client.acquire('js-shared-x', { mode: 'shared', ttlMs: 10000 });
  assert.equal(reader.mode, 'shared');
  assert.ok(!JSON.stringify(reader).includes(reader.token), 'the token stays out of JSON');
  await assert.rejects(client.acquire('js-shared-x', { waitMs: 0 }), (e) => e instanceof TakenError && e.code === 'taken');
  await assert.rejects(client.acquire('js-shared-x', { mode: 'exclusive', waitMs: 0 }), TakenError);
  await assert.rejects(client.hold('js-shared-x', { waitMs: 0 }), TakenError);

  // Re-entry by token in the grant's mode; in the other mode it is refused.
  const again = await client.acquire('js-shared-x', { mode: 'shared', token: reader.token, ttlMs: 10000 });
  assert.equal(again.token, reader.token);
  assert.equal(again.holdCount, 2);
  assert.equal(again.mode, 'shared');
  await assert.rejects(client.acquire('js-shared-x', { token: reader.token }), (e) => e.status === 409 && e.code === 'not_reentrant');
  const extended = await client.extend('js-shared-x', reader.token, { ttlMs: 20000 });
  assert.equal(extended.ttlMs, 20000);
  assert.equal(await client.release('js-shared-x', reader.token), false); // the count went down
  assert.equal(await client.release('js-shared-x', reader.token), true);

  const writer = await client.acquire('js-shared-x', { waitMs: 0 });
  assert.equal(await client.release('js-shared-x', writer.token), true);
});

test('a mode other than shared or exclusive is refused before any request', async () => {
  // No agent listens here: a request would fail as unreachable, not as a TypeError.
  const nobody = new Client(path.join(agent.dir, 'nobody.sock'));
  for (const mode of ['read', 'Shared', 'write', 1, true]) {
    const refused = (e) => e instanceof TypeError && /'exclusive', 'shared'/.test(e.message);
    await assert.rejects(nobody.acquire('js-mode', { mode }), refused, `acquire ${mode}`);
    await assert.rejects(nobody.hold('js-mode', { mode }), refused, `hold ${mode}`);
    await assert.rejects(nobody.using('js-mode', { mode }, () => {}), refused, `using ${mode}`);
  }
  // Exclusive, named or not, is sent: it reaches the (absent) agent.
  await assert.rejects(nobody.acquire('js-mode', { mode: 'exclusive' }), UnreachableError);
  await assert.rejects(nobody.hold('js-mode', { mode: undefined }), UnreachableError);
});
