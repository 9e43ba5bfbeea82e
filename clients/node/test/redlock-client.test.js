'use strict';
// Locks and holds against a real agent on three real redis-server masters
// (`redlock-agent dev`), started once for these tests, through the package
// as installed (`require('redlock-agent-client')`).
//
//   npm test                 # in clients/node, or node --test in a project that installed it

const { test, before, beforeEach, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const {
  Client,
  lockPath,
  ApiError,
  TakenError,
  LostError,
  UnreachableError,
  LockLostError,
} = require('redlock-agent-client');
const { waitFor, within, start, stop } = require('./support.js');

let agent;
let dir;
let socket;
let client;
let admin;

before(async () => {
  agent = await start();
  ({ dir, socket, client, admin } = agent);
});

// On a loaded machine a master may miss a 50 ms probe and count as down for
// a moment (the agent then answers no_quorum, rightly); each test starts
// from a usable quorum.
beforeEach(async () => {
  await waitFor('a usable quorum', async () => (await client.nodes()).available);
});

after(() => stop(agent));

test('acquire, extend, release round trip', async () => {
  const grant = await client.acquire('js-orders-42', { ttlMs: 10000, owner: 'billing-worker-3' });
  assert.equal(grant.resource, 'js-orders-42');
  assert.equal(grant.ttlMs, 10000);
  assert.ok(grant.validityMs > 0 && grant.validityMs <= 10000);
  assert.ok(grant.token.endsWith('.billing-worker-3'), grant.token);
  assert.ok(!JSON.stringify(grant).includes(grant.token), 'the token stays out of JSON');

  await assert.rejects(client.acquire('js-orders-42'), (e) => e instanceof TakenError && e.status === 409 && e.code === 'taken');

  const extended = await client.extend('js-orders-42', grant.token, { ttlMs: 20000 });
  assert.equal(extended.ttlMs, 20000);
  assert.ok(extended.validityMs > 10000);

  assert.equal(await client.release('js-orders-42', grant.token), true);
  assert.equal(await client.release('js-orders-42', grant.token), false);
  await assert.rejects(client.extend('js-orders-42', grant.token), LostError);
});

test('a waiter gets the lock when it is released', async () => {
  const held = await client.acquire('js-queue', { ttlMs: 30000 });
  const waiter = client.acquire('js-queue', { waitMs: 10000 });
  await waitFor('the waiter to queue', async () =>
    (await client.locks()).locks.some((l) => l.resource === 'js-queue' && l.waiters === 1),
  );
  assert.equal(await client.release('js-queue', held.token), true);
  const grant = await waiter;
  assert.notEqual(grant.token, held.token);
  assert.equal(await client.release('js-queue', grant.token), true);
});

test('resources are encoded once and refusals keep their code', async () => {
  const odd = "js/orders:42%20x!'()";
  assert.equal(lockPath('a/b', 'hold'), '/v1/locks/a%2Fb/hold');
  const grant = await client.acquire(odd);
  assert.equal(grant.resource, odd);
  assert.ok((await client.locks()).locks.some((l) => l.resource === odd));
  assert.equal(await client.release(odd, grant.token), true);

  await assert.rejects(client.acquire('a[b'), (e) => e instanceof ApiError && e.status === 400 && e.code === 'invalid_resource');
  // Below twice lock.node_timeout (50 ms in dev): refused.
  await assert.rejects(client.acquire('js-r', { ttlMs: 1 }), (e) => e.code === 'ttl_out_of_range');
});

test('a fenced grant carries a fence larger than every earlier one', async () => {
  const first = await client.acquire('js-fenced', { fence: true });
  assert.equal(typeof first.fence, 'number');
  assert.equal(await client.release('js-fenced', first.token), true);
  const second = await client.acquire('js-fenced', { fence: true });
  assert.ok(second.fence > first.fence);
  assert.equal(await client.release('js-fenced', second.token), true);
  const plain = await client.acquire('js-unfenced');
  assert.equal(plain.fence, null);
  await client.release('js-unfenced', plain.token);
  await client.using('js-fenced', { fence: true }, async (lock) => {
    assert.ok(lock.fence > second.fence);
  });
});

test('a lock is re-entered with its token', async () => {
  const grant = await client.acquire('js-reentrant', { ttlMs: 10000 });
  assert.equal(grant.holdCount, null);
  const again = await client.acquire('js-reentrant', { ttlMs: 10000, token: grant.token });
  assert.equal(again.token, grant.token);
  assert.equal(again.holdCount, 2);
  assert.equal(await client.release('js-reentrant', grant.token), false); // the count went down
  await assert.rejects(client.acquire('js-reentrant'), TakenError);
  assert.equal(await client.release('js-reentrant', grant.token), true);
  await assert.rejects(client.acquire('js-reentrant', { token: grant.token }), (e) => e.code === 'not_reentrant');

  // A hold re-enters too: closing it lowers the count as a release does.
  const again2 = await client.acquire('js-reentrant', { ttlMs: 10000 });
  await client.using('js-reentrant', { ttlMs: 10000, token: again2.token }, async (lock) => {
    assert.equal(lock.token, again2.token);
    assert.equal(lock.holdCount, 2);
  });
  await assert.rejects(client.acquire('js-reentrant'), TakenError);
  assert.equal(await client.release('js-reentrant', again2.token), true);

  // A re-entering hold's release is its close: one release, not two, so
  // the first acquire still holds the lock and releases it.
  const again3 = await client.acquire('js-reentrant', { ttlMs: 10000 });
  const inner = await client.hold('js-reentrant', { ttlMs: 10000, token: again3.token });
  assert.equal(inner.holdCount, 2);
  assert.equal(await inner.release(), true);
  await assert.rejects(client.acquire('js-reentrant'), TakenError);
  assert.equal(await client.release('js-reentrant', again3.token), true);
});

test('an absent agent is unreachable', async () => {
  const nobody = new Client(path.join(dir, 'nobody.sock'));
  await assert.rejects(nobody.nodes(), (e) => e instanceof UnreachableError && /nobody\.sock/.test(e.message));
});

test('a hold renews and releases when using() ends', async () => {
  let renewals = 0;
  const result = await client.using('js-batch', { ttlMs: 600, owner: 'js' }, async (lock, signal) => {
    lock.on('renewed', () => renewals++);
    const first = lock.validUntil;
    await waitFor('a renewal', () => lock.validUntil > first);
    lock.throwIfLost();
    assert.equal(signal.aborted, false);
    return 'worked';
  });
  assert.equal(result, 'worked');
  assert.ok(renewals >= 1);
  // A TTL far longer than the wait: only the release lets this through.
  const grant = await client.acquire('js-batch', { ttlMs: 30000, waitMs: 5000 });
  assert.equal(await client.release('js-batch', grant.token), true);
});

test("a hold's signal aborts when an operator force-releases the lock", async () => {
  let heard = null;
  await assert.rejects(
    client.using('js-nightly', { ttlMs: 2000 }, async (lock, signal) => {
      lock.on('lost', (e) => (heard = e));
      const forced = await admin.forceRelease('js-nightly');
      assert.equal(forced.deleted, 3);
      const reason = await within('the loss notice', lock.lost());
      assert.ok(signal.aborted);
      assert.equal(signal.reason, reason);
      assert.equal(lock.lostReason, 'force_released');
      assert.throws(() => lock.throwIfLost(), LockLostError);
    }),
    (e) => e instanceof LockLostError && e.reason === 'force_released',
  );
  assert.ok(heard instanceof LockLostError);
});

test('a hold stops on its own clock when the agent is frozen', async () => {
  // SIGSTOP: the agent keeps its socket but sends nothing, so neither a
  // renewal nor a loss notice arrives; the client's own deadline (a
  // twentieth of the validity before its end) must abort the signal.
  await assert.rejects(
    client.using('js-frozen', { ttlMs: 1000 }, async (lock, signal) => {
      agent.process.kill('SIGSTOP');
      try {
        await within('the local expiry', lock.lost());
      } finally {
        agent.process.kill('SIGCONT');
      }
      assert.ok(signal.aborted);
      assert.equal(lock.lostReason, 'expired');
    }),
    (e) => e instanceof LockLostError && e.reason === 'expired',
  );
  await waitFor('the agent to answer', async () => (await client.nodes()).available);
});

test('the hold example prints the loss notice', async () => {
  const installed = path.dirname(require.resolve('redlock-agent-client/package.json'));
  const example = spawn(process.execPath, [path.join(installed, 'examples', 'hold.js'), socket, 'js-example'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => example.once('exit', resolve));
  const lines = readline.createInterface({ input: example.stdout });
  const iterator = lines[Symbol.asyncIterator]();
  try {
    const first = await within('the example to hold', iterator.next());
    assert.match(first.value, /^held js-example/);
    await admin.forceRelease('js-example');
    const next = await within('the loss notice', iterator.next());
    assert.equal(next.value, 'stopped: the lock on js-example was lost: force_released');
    assert.equal(await exited, 1);
  } finally {
    if (example.exitCode === null) example.kill('SIGKILL');
  }
});
