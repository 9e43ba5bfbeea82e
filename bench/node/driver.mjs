// The node-redlock driver (redlock v5 beta from npm, ioredis clients): one
// Redlock over five ioredis clients, shared by every client loop of this
// process, as an application would share it. Speaks the driver protocol of
// bench/src/spec.rs: a JSON spec as the only argument, one JSON report line
// on stdout. Percentiles, Jain and the hot-key tracker follow
// bench/src/stats.rs; keep them in step.

import { readFileSync } from "node:fs";
import Redis from "ioredis";
import Redlock, { ExecutionError } from "redlock";

// The installed version (redlock's package.json is not in its exports).
const version = (name) =>
  JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), "utf8")).version.replace(/^v/, "");

// The library's defaults (its `defaultSettings`), and tuned for a hot key.
const DEFAULT = { retryCount: 10, retryDelay: 200, retryJitter: 100 };
const TUNED = { retryCount: -1, retryDelay: 10, retryJitter: 10 };

const spec = JSON.parse(process.argv[2]);
const now = () => performance.now();

function percentiles(samples) {
  if (samples.length === 0) return { count: 0, p50: 0, p90: 0, p99: 0, p999: 0, max: 0 };
  samples.sort((a, b) => a - b);
  const n = samples.length;
  const rank = (p) => samples[Math.min(Math.max(Math.ceil(p * n), 1), n) - 1];
  return { count: n, p50: rank(0.5), p90: rank(0.9), p99: rank(0.99), p999: rank(0.999), max: samples[n - 1] };
}

const settings = spec.tuned ? TUNED : DEFAULT;
const clients = spec.masters.map((url) => new Redis(url, { lazyConnect: false }));
// ioredis reports connection errors as events; the votes carry them too.
for (const c of clients) c.on("error", () => {});
const redlock = new Redlock(clients, { ...settings, driftFactor: 0.01 });
redlock.on("error", () => {});

const base = now();
// The driver's own CPU (user + system) from the warm-up's start, as the
// Rust drivers' getrusage: the cost of the library in the application.
const cpuStart = process.cpuUsage();
// Tells the orchestrator when the warm-up started (it times faults by it).
process.stderr.write("ready\n");
const window = { start: base + spec.warmup_ms, end: base + spec.warmup_ms + spec.duration_ms };
const inWindow = (t) => t >= window.start && t <= window.end;

// Hot-key tracker.
const hot = { holders: 0, releaseStarted: null, releaser: null, handoffs: [], handoffsOther: [], grants: [], overlaps: 0 };
function granted(t, client) {
  if (hot.holders > 0) hot.overlaps++;
  hot.holders++;
  if (hot.releaseStarted !== null) {
    if (inWindow(t)) {
      hot.handoffs.push(t - hot.releaseStarted);
      if (hot.releaser !== client) hot.handoffsOther.push(t - hot.releaseStarted);
    }
    hot.releaseStarted = null;
  }
  if (inWindow(t)) hot.grants.push(t);
}
function releasing(t, client) {
  hot.holders = Math.max(0, hot.holders - 1);
  hot.releaseStarted = t;
  hot.releaser = client;
}

const logs = [];
const waiting = new Array(spec.clients).fill(null);

// Acquire until granted or the window's end: node-redlock retries
// `retryCount` times itself, then throws ExecutionError; an application that
// must have the lock calls it again.
async function acquire(resource) {
  for (;;) {
    try {
      return { lock: await redlock.acquire([resource], spec.ttl_ms) };
    } catch (e) {
      if (!(e instanceof ExecutionError)) return { error: String(e) };
      if (now() >= window.end) return { timedOut: true };
    }
  }
}

async function clientLoop(index) {
  const resource = spec.keys === "hot" ? `${spec.resource_prefix}-hot` : `${spec.resource_prefix}-c${index}`;
  const log = { acquire: [], cycle: [], grantsInWindow: 0, grantsTotal: 0, cycles: 0, timeouts: 0, errors: 0, errorSample: null, maxWait: 0 };
  const error = (m) => { log.errors++; if (log.errorSample === null) log.errorSample = m; };
  while (now() < window.end) {
    const began = now();
    waiting[index] = began;
    const outcome = await acquire(resource);
    const at = now();
    waiting[index] = null;
    if (at >= window.start && began < window.end) log.maxWait = Math.max(log.maxWait, Math.min(at, window.end) - began);
    if (outcome.lock) {
      log.grantsTotal++;
      if (spec.keys === "hot") granted(at, index);
      if (inWindow(at)) { log.grantsInWindow++; log.acquire.push(at - began); }
      if (spec.keys === "hot") releasing(now(), index);
      try {
        await outcome.lock.release();
        const done = now();
        if (inWindow(done)) { log.cycles++; log.cycle.push(done - began); }
      } catch (e) {
        error(`release: ${e}`);
      }
    } else if (outcome.timedOut) {
      // The deadline is the window's end: this client is done.
      log.timeouts++;
      break;
    } else {
      error(`acquire: ${outcome.error}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  return log;
}

const loops = [];
for (let i = 0; i < spec.clients; i++) loops.push(clientLoop(i).then((log) => logs.push(log)));
// A loop still inside a call 3 s after the window is stuck.
await Promise.race([Promise.all(loops), new Promise((r) => setTimeout(r, Math.max(0, window.end - now()) + 3000))]);
const cpuUsed = process.cpuUsage(cpuStart);

const report = {
  peer: spec.peer,
  library: `redlock ${version("redlock")} (ioredis ${version("ioredis")}, node ${process.versions.node})`,
  settings: spec.tuned
    ? `tuned: retryCount -1 (unlimited), retryDelay ${TUNED.retryDelay}ms ± ${TUNED.retryJitter}ms`
    : `defaults: retryCount ${DEFAULT.retryCount}, retryDelay ${DEFAULT.retryDelay}ms ± ${DEFAULT.retryJitter}ms, acquire called again until granted`,
  clients: spec.clients,
  window_s: spec.duration_ms / 1000,
  cycles: 0, grants_total: 0, per_client_grants: [], max_wait_ms: 0,
  overlaps: 0, timeouts: 0, errors: 0, error_sample: null, stuck: spec.clients - logs.length,
  driver_cpu_s: (cpuUsed.user + cpuUsed.system) / 1e6,
};
const acquireSamples = [];
const cycleSamples = [];
for (const log of logs) {
  acquireSamples.push(...log.acquire);
  cycleSamples.push(...log.cycle);
  report.cycles += log.cycles;
  report.grants_total += log.grantsTotal;
  report.per_client_grants.push(log.grantsInWindow);
  report.timeouts += log.timeouts;
  report.errors += log.errors;
  report.max_wait_ms = Math.max(report.max_wait_ms, log.maxWait);
  if (report.error_sample === null) report.error_sample = log.errorSample;
}
const t = now();
for (const since of waiting) {
  if (since !== null) report.max_wait_ms = Math.max(report.max_wait_ms, Math.max(0, Math.min(t, window.end) - since));
}
report.acquire_ms = percentiles(acquireSamples);
report.cycle_ms = percentiles(cycleSamples);
if (spec.keys === "hot") {
  report.handoff_ms = percentiles(hot.handoffs);
  report.handoff_other_ms = percentiles(hot.handoffsOther);
  const edges = [window.start, ...hot.grants, window.end].sort((a, b) => a - b);
  let longest = 0;
  for (let i = 1; i < edges.length; i++) longest = Math.max(longest, edges[i] - edges[i - 1]);
  report.longest_gap_ms = longest;
  report.overlaps = hot.overlaps;
}
process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
