'use strict';
// Hold a lock while working in steps; stop at once if it is lost.
//
//   node examples/hold.js ./redlock.sock nightly-report
//
// Then, from another shell, play the operator and take the lock away:
//
//   curl --unix-socket ./redlock-admin.sock -X POST localhost/v1/locks/nightly-report/force-release
//
// and this prints the loss notice at once (force_released) and exits 1.

const { setTimeout: sleep } = require('node:timers/promises');
const { Client, LockLostError } = require('redlock-agent-client');

async function main(socketPath, resource) {
  const client = new Client(socketPath);
  try {
    await client.using(resource, { ttlMs: 2000, waitMs: 5000, owner: 'example' }, async (lock, signal) => {
      console.log(`held ${resource}, valid for ${lock.validityMs} ms, renewed by the agent`);
      for (let step = 0; step < 600; step++) {
        await sleep(100, undefined, { signal }); // one step of the work; aborts on loss
      }
    });
    console.log('done; released');
    return 0;
  } catch (e) {
    if (!(e instanceof LockLostError)) throw e;
    console.log(`stopped: ${e.message}`);
    return 1;
  }
}

main(process.argv[2], process.argv[3] || 'nightly-report').then((code) => {
  process.exitCode = code;
});
