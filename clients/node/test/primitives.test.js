'use strict';
// Semaphores and elections against a real agent on three real redis-server
// masters (`redlock-agent dev`), through the package as installed.

const { test, before, beforeEach, after } = require('node:test');
const assert = require('node:assert/strict');

const { ApiError, TakenError, LimitMismatchError, NoLeaderError, LockLostError } = require('redlock-agent-client');
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

test('k permits, the (k+1)th taken, then granted after a release', async () => {
  const permits = [];
  for (let i = 0; i < 3; i++) permits.push(await client.acquirePermit('js-sem', 3, { ttlMs: 30000, owner: `w${i}` }));
  assert.deepEqual(permits.map((p) => p.permit).sort(), [0, 1, 2]);
  assert.ok(!JSON.stringify(permits).includes(permits[0].token), 'tokens stay out of JSON');
  const listed = await client.semaphore('js-sem');
  assert.equal(listed.limit, 3);
  assert.equal(listed.permits.length, 3);

  await assert.rejects(client.acquirePermit('js-sem', 3), (e) => e instanceof TakenError && e.status === 409 && e.code === 'taken');

  const waiter = client.acquirePermit('js-sem', 3, { ttlMs: 30000, waitMs: 10000 });
  await waitFor('the waiter to queue', async () => (await client.semaphore('js-sem')).waiters === 1);
  const [freed] = permits.splice(1, 1);
  assert.equal(await client.releasePermit('js-sem', freed.permit, freed.token), true);
  const granted = await within('the waiter', waiter);
  assert.equal(granted.permit, freed.permit);
  assert.notEqual(granted.token, freed.token);

  // A permit's token alone names it; the older (permit, token) still works.
  const extended = await client.extendPermit('js-sem', granted.token, { ttlMs: 20000 });
  assert.equal(extended.ttlMs, 20000);
  assert.equal((await client.extendPermit('js-sem', granted.permit, granted.token, { ttlMs: 30000 })).ttlMs, 30000);
  for (const p of [...permits, granted]) assert.equal(await client.releasePermit('js-sem', p.token), true);
  assert.deepEqual((await client.semaphore('js-sem')).permits, []);
});

test('another limit is refused while permits are held', async () => {
  const held = await client.acquirePermit('js-sem-limit', 2, { ttlMs: 500 });
  await assert.rejects(
    client.acquirePermit('js-sem-limit', 5),
    (e) => e instanceof LimitMismatchError && e.status === 409 && e.code === 'limit_mismatch',
  );
  assert.equal(await client.releasePermit('js-sem-limit', held.permit, held.token), true);
  await assert.rejects(client.acquirePermit('js-sem-limit', 0), (e) => e instanceof ApiError && e.code === 'invalid_request');
});

test('a permit hold names its permit, is renewed, and releases when usingPermit() ends', async () => {
  const result = await client.usingPermit('js-sem-hold', 1, { ttlMs: 600, fence: true }, async (permit, signal) => {
    assert.equal(permit.permit, 0);
    assert.equal(typeof permit.fence, 'number');
    const first = permit.validUntil;
    await waitFor('a renewal', () => permit.validUntil > first);
    await assert.rejects(client.acquirePermit('js-sem-hold', 1), TakenError);
    assert.equal(signal.aborted, false);
    return 'worked';
  });
  assert.equal(result, 'worked');
  const granted = await client.acquirePermit('js-sem-hold', 1, { waitMs: 5000 });
  assert.equal(await client.releasePermit('js-sem-hold', granted.permit, granted.token), true);
});

test('a second campaigner leads with a larger term after the first resigns', async () => {
  await assert.rejects(
    client.leader('js-election'),
    (e) => e instanceof NoLeaderError && e.status === 404 && e.code === 'no_leader',
  );
  const first = await client.campaign('js-election', { ttlMs: 2000, owner: 'a', value: '10.0.0.1:80' });
  const term = await within('the first election', first.elected());
  assert.equal(typeof term, 'number');
  assert.ok(first.isLeader);
  const now = await client.leader('js-election');
  assert.deepEqual([now.term, now.value, now.owner], [term, '10.0.0.1:80', 'a']);

  const observer = await client.observe('js-election');
  const seen = observer[Symbol.asyncIterator]();
  assert.equal((await within('the observer', seen.next())).value.term, term);

  const second = await client.campaign('js-election', { ttlMs: 2000, owner: 'b', value: '10.0.0.2:80' });
  try {
    await waitFor('the second to wait', () => second.leader !== null);
    assert.equal(second.leader.term, term);
    assert.equal(second.isLeader, false);
    first.resign();
    const secondTerm = await within('the second election', second.elected());
    assert.ok(secondTerm > term, `${secondTerm} > ${term}`);
    await waitFor('GET to name the second', async () => (await client.leader('js-election')).term === secondTerm);
    let next;
    do next = (await within('the observer', seen.next())).value;
    while (next === null || next.term !== secondTerm);
    assert.equal(next.value, '10.0.0.2:80');
  } finally {
    second.close();
    observer.close();
  }
  await waitFor('no leader', () => client.leader('js-election').then(() => false, (e) => e instanceof NoLeaderError));
});

test("lead() runs while leading and its signal aborts when the leadership is lost", async () => {
  let lost = null;
  await assert.rejects(
    client.lead('js-ousted', { ttlMs: 600, maxHoldMs: 1500 }, async (campaign, signal) => {
      campaign.on('lost', (e) => (lost = e));
      assert.ok(campaign.isLeader);
      await within('the loss notice', campaign.lost());
      assert.ok(signal.aborted);
      assert.throws(() => campaign.throwIfLost(), LockLostError);
    }),
    (e) => e instanceof LockLostError && e.reason === 'max_hold',
  );
  assert.ok(lost instanceof LockLostError);
});
