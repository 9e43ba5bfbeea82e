'use strict';
// A real agent for the tests: `redlock-agent dev` (three real redis-server
// masters) on a temp socket, started by start() and stopped by stop(); and
// polling with a deadline.
//
// The agent binary is $REDLOCK_AGENT, or target/debug/redlock-agent of this
// repository (`cargo build -p redlock-agent`).

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { setTimeout: sleep } = require('node:timers/promises');

const { Client, UnreachableError } = require('redlock-agent-client');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const DEADLINE_MS = 15000;

/** Polls `condition` until it is true; fails after DEADLINE_MS. */
async function waitFor(what, condition) {
  const end = Date.now() + DEADLINE_MS;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** `promise`, or a failure naming `what` after DEADLINE_MS. */
async function within(what, promise) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), DEADLINE_MS);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Starts the agent; resolves once a quorum is usable. */
async function start() {
  const bin = process.env.REDLOCK_AGENT || path.join(ROOT, 'target', 'debug', 'redlock-agent');
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch (_) {
    throw new Error(`no agent binary at ${bin}: run \`cargo build -p redlock-agent\` or set REDLOCK_AGENT`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redlock-node-'));
  const socket = path.join(dir, 'agent.sock');
  const agent = { dir, socket, log: '' };
  agent.process = spawn(bin, ['dev', '--socket', socket, '--masters', '3', '--metrics', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  agent.process.stdout.on('data', (d) => (agent.log += d));
  agent.process.stderr.on('data', (d) => (agent.log += d));
  agent.client = new Client(socket);
  // Force release is served only on the admin socket, beside it.
  agent.admin = new Client(path.join(dir, 'admin.sock'));
  await waitFor('the agent and a usable quorum', async () => {
    if (agent.process.exitCode !== null) throw new Error(`the agent exited:\n${agent.log}`);
    try {
      return (await agent.client.nodes()).available;
    } catch (e) {
      if (e instanceof UnreachableError) return false;
      throw e;
    }
  });
  return agent;
}

/** SIGTERM (SIGKILL after DEADLINE_MS), then removes its directory. */
async function stop(agent) {
  if (!agent) return;
  if (agent.process.exitCode === null) {
    const exited = new Promise((resolve) => agent.process.once('exit', resolve));
    agent.process.kill('SIGTERM');
    const timer = setTimeout(() => agent.process.kill('SIGKILL'), DEADLINE_MS);
    await exited;
    clearTimeout(timer);
  }
  fs.rmSync(agent.dir, { recursive: true, force: true });
}

module.exports = { DEADLINE_MS, waitFor, within, start, stop };
