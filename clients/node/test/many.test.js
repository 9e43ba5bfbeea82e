'use strict';
// Locks on several resources at once against a real agent on three real
// redis-server masters (`redlock-agent dev`), through the package as
// installed: all of them or none under one token, and a hold of several
// that frees them all when it closes.

const { test, before, beforeEach, after } = require('node:test');
const assert = require('node:assert/strict');

const { TakenError, LostError, LockLostError } = require('redlock-agent-client');
const { waitFor, within, start, stop } = require('./support.js');

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

/** Each resource is granted alone (within a short wait), then released. */
async function assertFree(...resources) {
  for (const resource of resources) {
    const grant = await client.acquire(resource, { ttlMs: 30000, waitMs: 5000 });
    assert.equal(await client.release(resource, grant.token), true);
  }
}

test('two resources under one token refuse a single acquire until released', async () => {
  const grant = await client.acquireMany(['js-many-b', 'js-many-a'], { ttlMs: 10000, owner: 'js-many' });
  assert.deepEqual(grant.resources, ['js-many-a', 'js-many-b']);
  assert.equal(grant.ttlMs, 10000);
  assert.ok(grant.validityMs > 0 && grant.validityMs <= 10000);
  assert.ok(grant.token.endsWith('.js-many'));
  assert.ok(!JSON.stringify(grant).includes(grant.token), 'the token stays out of JSON');

  for (const resource of grant.resources) {
    await assert.rejects(client.acquire(resource), (e) => e instanceof TakenError && e.status === 409 && e.code === 'taken');
  }
  // All or nothing: one taken resource refuses the whole request.
  await assert.rejects(client.acquireMany(['js-many-a', 'js-many-c']), TakenError);
  await assertFree('js-many-c');

  const extended = await client.extendMany(grant.token, { ttlMs: 20000 });
  assert.equal(extended.ttlMs, 20000);
  assert.ok(extended.validityMs > 10000);

  assert.equal(await client.releaseMany(grant.token), true);
  await assertFree('js-many-a', 'js-many-b');
  assert.equal(await client.releaseMany(grant.token, { resources: grant.resources }), false);
  await assert.rejects(client.extendMany(grant.token, { resources: grant.resources }), LostError);
});

test('resources are an array, not one string', async () => {
  await assert.rejects(client.acquireMany('js-many-ab'), TypeError);
  await assert.rejects(client.holdMany('js-many-ab'), TypeError);
});

test('a hold of several resources frees them all when it closes', async () => {
  const lock = await client.holdMany(['js-hold-b', 'js-hold-a'], { ttlMs: 600, fence: true });
  try {
    assert.deepEqual(lock.resources, ['js-hold-a', 'js-hold-b']);
    assert.equal(lock.resource, 'js-hold-a,js-hold-b');
    assert.equal(typeof lock.fence, 'number');
    await within('a renewal', new Promise((resolve) => lock.once('renewed', resolve)));
    for (const resource of lock.resources) await assert.rejects(client.acquire(resource), TakenError);
    lock.throwIfLost();
  } finally {
    lock.close();
  }
  // A TTL far longer than the wait: only the release lets these through.
  await assertFree('js-hold-a', 'js-hold-b');
});

test('usingMany() releases them all after, and hears of a force release of one', async () => {
  const result = await client.usingMany(['js-using-a', 'js-using-b'], { ttlMs: 10000 }, async (lock) => lock.resources);
  assert.deepEqual(result, ['js-using-a', 'js-using-b']);
  await assertFree('js-using-a', 'js-using-b');

  await assert.rejects(
    client.usingMany(['js-forced-a', 'js-forced-b'], { ttlMs: 2000 }, async (lock, signal) => {
      await agent.admin.forceRelease('js-forced-b');
      await within('the loss notice', lock.lost());
      assert.ok(signal.aborted);
    }),
    (e) => e instanceof LockLostError && e.reason === 'force_released',
  );
  await assertFree('js-forced-a', 'js-forced-b');
});
