'use strict';
/**
 * A client of the redlock-agent socket API for Node.js 18+, no dependencies.
 *
 * The agent runs beside the application and serves distributed locks,
 * semaphores and leader elections (Redlock over N Redis masters) as
 * HTTP/1.1 + JSON on a Unix socket.
 *
 *   const { Client } = require('redlock-agent-client');
 *   const client = new Client('/run/redlock/agent.sock');
 *   await client.using('orders-42', { ttlMs: 10000, waitMs: 5000 }, async (lock, signal) => {
 *     await doTheWork({ signal });   // signal aborts the moment the lock is lost
 *   });                              // released on every master
 *
 * acquire / extend / release map one-to-one to the API, as do the calls of
 * a lock on several resources at once (acquireMany, extendMany,
 * releaseMany, holdMany, usingMany), the semaphore calls (acquirePermit,
 * extendPermit, releasePermit, holdPermit, usingPermit) and the election
 * calls (campaign, lead, leader, observe). hold() keeps a lock
 * for as long as its connection is open: the agent renews it and streams
 * NDJSON events; the Hold's `signal` (an AbortSignal) aborts with a
 * LockLostError when the agent says `lost`, when the connection ends
 * without a notice, or when no renewal arrived by a twentieth of the last
 * validity before its end (on this process's monotonic clock). using()
 * wraps a hold around a function and rejects with LockLostError if the lock
 * was lost while it ran.
 *
 * Names are given as they are; they are percent-encoded here, once.
 * `fence: true` asks the agent for a fencing token: the answer's `fence`, a
 * number larger than every earlier grant's, to pass to storage with each
 * write. An election's `term` is such a fence.
 * `mode: 'shared'` takes a lock as a reader (any number at once, while no
 * exclusive holder is there); `'exclusive'`, the default, as its one holder.
 * Times (`validUntil`) are on performance.now()'s clock, in ms.
 *
 * Layout: this file (the client and its answers), streams.js (holds,
 * campaigns, observers and the NDJSON lines they read), errors.js (every
 * error class and the agent's codes), trace.js (the caller's trace context
 * as request headers).
 */

const http = require('node:http');
const { performance } = require('node:perf_hooks');
const {
  RedlockError,
  ApiError,
  TakenError,
  LostError,
  NoQuorumError,
  LimitMismatchError,
  NoLeaderError,
  UnreachableError,
  LockLostError,
  apiError,
} = require('./errors.js');
const { traceHeaders } = require('./trace.js');
const { Lines, Hold, Campaign, Observer, leader, withTimeout } = require('./streams.js');

/** Milliseconds a request may take beyond the wait it asks the agent for. */
const DEFAULT_TIMEOUT_MS = 5000;

/**
 * `/v1/locks/{resource}/{action}`, the resource percent-encoded as one path
 * segment (`/` included). The only place resources are encoded.
 */
function lockPath(resource, action) {
  return `/v1/locks/${segment(resource)}/${action}`;
}

/** `/v1/semaphores/{name}[/{action}]`, encoded as lockPath. */
function semaphorePath(name, action) {
  return action === undefined ? `/v1/semaphores/${segment(name)}` : `/v1/semaphores/${segment(name)}/${action}`;
}

/** `/v1/elections/{name}[/{action}]`, encoded as lockPath. */
function electionPath(name, action) {
  return action === undefined ? `/v1/elections/${segment(name)}` : `/v1/elections/${segment(name)}/${action}`;
}

/** `/v1/locks/{action}`: a lock on several resources, named in the body. */
function multiPath(action) {
  return `/v1/locks/${action}`;
}

function segment(name) {
  return encodeURIComponent(name).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

function body(fields) {
  const out = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null) out[k] = v;
  return out;
}

/** How a lock is held: one holder (the default) or any number of readers. */
const MODES = ['exclusive', 'shared'];

/**
 * A lock's mode as its request sends it: absent for `exclusive` (the
 * default), `shared` for a reader. Any other value is refused here, before
 * a request is made.
 */
function wireMode(mode) {
  if (mode === undefined || mode === null || mode === 'exclusive') return undefined;
  if (mode === 'shared') return mode;
  throw new TypeError(`mode must be one of ${MODES.map((m) => `'${m}'`).join(', ')}, not ${JSON.stringify(String(mode))}`);
}

/** The resources of a lock on several, as a JSON array; a lone string is refused. */
function resourceList(resources) {
  if (resources === undefined || resources === null) return undefined;
  if (typeof resources === 'string' || !Array.isArray(resources)) {
    throw new TypeError('resources must be an array of names');
  }
  return [...resources];
}

/**
 * A permit's token (which alone names it) and its number when given, from
 * (token, options) or the older (permit, token, options).
 */
function permitArgs(permit, token, options) {
  if (typeof permit === 'string') return { fields: { token: permit }, options: token || {} };
  if (typeof token !== 'string') throw new TypeError("a permit is extended and released by its token");
  return { fields: { permit, token }, options: options || {} };
}

class Client {
  /**
   * @param {string} socketPath the agent's socket
   * @param {{timeoutMs?: number}} [options] bound on each request beyond its wait
   */
  constructor(socketPath, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
    this.socketPath = String(socketPath);
    this.timeoutMs = timeoutMs;
  }

  /** Sends one request; resolves with the response (its body unread). */
  _send(method, path, payload, waitMs) {
    const limit = this.timeoutMs + (waitMs || 0);
    const data = payload === undefined ? undefined : Buffer.from(JSON.stringify(payload));
    return new Promise((resolve, reject) => {
      const headers = { ...traceHeaders(), host: 'localhost' };
      if (data) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = data.length;
      }
      // One connection per request (agent: false): no stale keep-alive
      // socket can ever swallow a lock request.
      const req = http.request({ socketPath: this.socketPath, method, path, headers, agent: false });
      const timer = setTimeout(() => {
        req.destroy(new UnreachableError(`${method} ${path}: no answer within ${limit} ms`));
      }, limit);
      req.on('response', (res) => {
        clearTimeout(timer);
        resolve({ req, res, limit });
      });
      req.on('error', (e) => {
        clearTimeout(timer);
        reject(e instanceof RedlockError ? e : new UnreachableError(`${method} ${path} on ${this.socketPath}: ${e.message}`, e));
      });
      req.end(data);
    });
  }

  /** One request whose answer is one JSON document. */
  async _call(method, path, payload, waitMs) {
    const { req, res, limit } = await this._send(method, path, payload, waitMs);
    const text = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        req.destroy();
        reject(new UnreachableError(`${method} ${path}: no answer within ${limit} ms`));
      }, limit);
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        resolve(Buffer.concat(chunks).toString('utf8'));
      });
      res.on('error', (e) => {
        clearTimeout(timer);
        reject(new UnreachableError(`${method} ${path}: ${e.message}`, e));
      });
    });
    if (res.statusCode < 200 || res.statusCode >= 300) throw apiError(res.statusCode, text);
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new UnreachableError(`unexpected answer: ${res.statusCode} ${text.slice(0, 200)}`, e);
    }
  }

  /**
   * Opens a stream (a hold, a campaign, an observer): its lines once the
   * agent answered 200, or the error it answered.
   */
  async _open(method, path, payload, waitMs) {
    const { req, res, limit } = await this._send(method, path, payload, waitMs);
    if (res.statusCode !== 200) {
      const chunks = [];
      for await (const c of res) chunks.push(c);
      throw apiError(res.statusCode, Buffer.concat(chunks).toString('utf8'));
    }
    return { req, lines: new Lines(res), limit };
  }

  /** Opens a hold's stream and reads its `acquired` line. */
  async _hold(path, name, payload, waitMs, resources, mode) {
    const { req, lines, limit } = await this._open('POST', path, payload, waitMs);
    let first;
    try {
      first = await withTimeout(lines.next(), limit, () => req.destroy());
    } catch (e) {
      req.destroy();
      throw e instanceof RedlockError ? e : new UnreachableError(`POST ${path}: ${e.message}`, e);
    }
    if (!first || first.event !== 'acquired') {
      req.destroy();
      throw new UnreachableError(`a hold must start with \`acquired\`, got ${JSON.stringify(first)}`);
    }
    return new Hold(this, name, req, lines, first, performance.now(), resources, mode);
  }

  // Locks.

  /**
   * The lock, if a quorum granted it within waitMs (default: one attempt).
   * ttlMs defaults to the agent's lock.default_ttl; the agent accepts twice
   * lock.node_timeout to lock.max_ttl. `mode: 'shared'` takes it as a
   * reader, beside any other readers (`'exclusive'`, the default: its one
   * holder); the grant's `mode` says which. `token` re-enters a lock this
   * process holds, in the mode it was granted in: the same token, and
   * `holdCount` releases before it is released on the masters. Rejects with
   * TypeError (a mode neither shared nor exclusive), TakenError,
   * NoQuorumError, ApiError (refused request) or UnreachableError.
   */
  async acquire(resource, { ttlMs, waitMs, owner, fence, token, mode } = {}) {
    const answer = await this._call(
      'POST',
      lockPath(resource, 'acquire'),
      body({ ttl_ms: ttlMs, wait_ms: waitMs, owner, fence, token, mode: wireMode(mode) }),
      waitMs,
    );
    return grant(answer, performance.now());
  }

  /** A new TTL from now. Rejects with LostError: stop using the lock. */
  async extend(resource, token, { ttlMs } = {}) {
    const answer = await this._call('POST', lockPath(resource, 'extend'), body({ token, ttl_ms: ttlMs }));
    return extended(answer, performance.now());
  }

  /**
   * Releases on every master. false means no quorum still held it: it had
   * expired, and the work may have overlapped another holder's (or, for a
   * re-entered lock, that a release is still owed). Throws NoQuorumError
   * when too many masters failed to tell (a retry with the same token is
   * safe).
   */
  async release(resource, token) {
    const answer = await this._call('POST', lockPath(resource, 'release'), { token });
    return answer.released;
  }

  /** For operators, on the admin socket: deletes the lock on every master, whoever holds it. */
  forceRelease(resource) {
    return this._call('POST', lockPath(resource, 'force-release'));
  }

  nodes() {
    return this._call('GET', '/v1/nodes');
  }

  locks() {
    return this._call('GET', '/v1/locks');
  }

  /**
   * A lock held while the returned Hold is open; resolves once the agent
   * sent `acquired`. Close it (or release it) to let go; `onDisconnect:
   * 'expire'` lets a lock whose connection ends expire instead. `token`
   * re-enters a lock this process holds while the hold lasts (closing it
   * then lowers the count as a release does). `mode` as acquire(); the
   * Hold's `mode` says which.
   */
  hold(resource, { ttlMs, waitMs, owner, maxHoldMs, fence, onDisconnect, token, mode } = {}) {
    let sent;
    try {
      sent = wireMode(mode);
    } catch (e) {
      return Promise.reject(e);
    }
    const payload = body({
      ttl_ms: ttlMs,
      wait_ms: waitMs,
      owner,
      max_hold_ms: maxHoldMs,
      fence,
      on_disconnect: onDisconnect,
      token,
      mode: sent,
    });
    return this._hold(lockPath(resource, 'hold'), resource, payload, waitMs, undefined, sent);
  }

  /**
   * Runs `fn(lock, signal)` while holding the lock and releases it after.
   * `signal` aborts (reason: a LockLostError) the moment the lock is lost;
   * pass it to what the work awaits. Rejects with that LockLostError if the
   * lock was lost while `fn` ran, even if `fn` finished.
   */
  async using(resource, options, fn) {
    return guarded(await this.hold(resource, options), fn);
  }

  // Locks on several resources at once.

  /**
   * A lock on every one of `resources` (2 to 32 distinct names), all granted
   * or none, under one token; options as acquire() (no re-entry). Rejects
   * with TakenError (one of them stayed held for all of waitMs),
   * NoQuorumError, ApiError or UnreachableError.
   */
  async acquireMany(resources, { ttlMs, waitMs, owner, fence } = {}) {
    const payload = body({ resources: resourceList(resources), ttl_ms: ttlMs, wait_ms: waitMs, owner, fence });
    const answer = await this._call('POST', multiPath('acquire'), payload, waitMs);
    return manyGrant(answer, performance.now());
  }

  /**
   * A new TTL from now for every resource of the token's grant. `resources`
   * is needed only through an agent that did not grant it. Rejects with
   * LostError: stop using all of them.
   */
  async extendMany(token, { ttlMs, resources } = {}) {
    const payload = body({ token, ttl_ms: ttlMs, resources: resourceList(resources) });
    return extended(await this._call('POST', multiPath('extend'), payload), performance.now());
  }

  /** Releases every resource of the token's grant on every master; false as release(). */
  async releaseMany(token, { resources } = {}) {
    const answer = await this._call('POST', multiPath('release'), body({ token, resources: resourceList(resources) }));
    return answer.released;
  }

  /**
   * Every one of `resources` held while the returned Hold is open, as
   * hold(): renewed, lost and released together. Its `resources` are sorted.
   */
  holdMany(resources, { ttlMs, waitMs, owner, maxHoldMs, fence, onDisconnect } = {}) {
    let names;
    try {
      names = (resourceList(resources) || []).sort();
    } catch (e) {
      return Promise.reject(e);
    }
    const payload = body({
      resources: names,
      ttl_ms: ttlMs,
      wait_ms: waitMs,
      owner,
      max_hold_ms: maxHoldMs,
      fence,
      on_disconnect: onDisconnect,
    });
    return this._hold(multiPath('hold'), names.join(','), payload, waitMs, names);
  }

  /** Runs `fn(lock, signal)` while holding every one of `resources`, as using(). */
  async usingMany(resources, options, fn) {
    return guarded(await this.holdMany(resources, options), fn);
  }

  // Semaphores.

  /**
   * One of `limit` permits of semaphore `name`, waiting up to waitMs for
   * one. Every user of a semaphore passes the same limit. Rejects with
   * TakenError (all held for all of waitMs), LimitMismatchError,
   * NoQuorumError, ApiError or UnreachableError.
   */
  async acquirePermit(name, limit, { ttlMs, waitMs, owner, fence } = {}) {
    const answer = await this._call(
      'POST',
      semaphorePath(name, 'acquire'),
      body({ limit, ttl_ms: ttlMs, wait_ms: waitMs, owner, fence }),
      waitMs,
    );
    return permitGrant(answer, performance.now());
  }

  /**
   * A new TTL from now for a permit, named by its token alone:
   * extendPermit(name, token, { ttlMs }) (the older (name, permit, token,
   * options) works too). Rejects with LostError: stop using it.
   */
  async extendPermit(name, permit, token, options) {
    const { fields, options: { ttlMs } } = permitArgs(permit, token, options);
    const answer = await this._call('POST', semaphorePath(name, 'extend'), body({ ...fields, ttl_ms: ttlMs }));
    return extended(answer, performance.now());
  }

  /** Releases a permit on every master, named as in extendPermit(); false as release(). */
  async releasePermit(name, permit, token) {
    const answer = await this._call('POST', semaphorePath(name, 'release'), permitArgs(permit, token).fields);
    return answer.released;
  }

  /** A permit held while the returned Hold is open, as hold(); `permit` says which. */
  holdPermit(name, limit, { ttlMs, waitMs, owner, maxHoldMs, fence, onDisconnect } = {}) {
    const payload = body({
      limit,
      ttl_ms: ttlMs,
      wait_ms: waitMs,
      owner,
      max_hold_ms: maxHoldMs,
      fence,
      on_disconnect: onDisconnect,
    });
    return this._hold(semaphorePath(name, 'hold'), name, payload, waitMs);
  }

  /** Runs `fn(permit, signal)` while holding a permit, as using(). */
  async usingPermit(name, limit, options, fn) {
    return guarded(await this.holdPermit(name, limit, options), fn);
  }

  /** The semaphore's held permits (never tokens), `limit` while any is held, this agent's `waiters`. */
  semaphore(name) {
    return this._call('GET', semaphorePath(name));
  }

  // Elections.

  /**
   * Campaigns to lead election `name`; resolves at once with the Campaign.
   * `await campaign.elected()` for the term. `value` (up to 1024 bytes) is
   * published to everyone who asks who leads. Closing the campaign resigns
   * (or stops waiting).
   */
  async campaign(name, { ttlMs, owner, value, maxHoldMs } = {}) {
    const payload = body({ ttl_ms: ttlMs, owner, value, max_hold_ms: maxHoldMs });
    const { req, lines } = await this._open('POST', electionPath(name, 'campaign'), payload);
    return new Campaign(this, name, req, lines);
  }

  /**
   * Waits to lead election `name`, then runs `fn(campaign, signal)` and
   * resigns after. `signal` aborts the moment the leadership is lost;
   * rejects with that LockLostError if it was lost while `fn` ran.
   */
  async lead(name, options, fn) {
    const campaign = await this.campaign(name, options);
    try {
      await campaign.elected();
    } catch (e) {
      campaign.close();
      throw e;
    }
    return guarded(campaign, fn);
  }

  /** Who leads election `name` now. Rejects with NoLeaderError when no one does. */
  async leader(name) {
    return leader(await this._call('GET', electionPath(name)));
  }

  /**
   * The leader of election `name` now, then every change: `for await
   * (const leader of observer)`, each a leader or null (no leader). Close
   * it (or break out of the loop) when done.
   */
  async observe(name) {
    const { req, lines } = await this._open('GET', electionPath(name, 'observe'));
    return new Observer(req, lines);
  }
}

async function guarded(stream, fn) {
  try {
    let result;
    try {
      result = await fn(stream, stream.signal);
    } catch (e) {
      if (stream.signal.aborted) throw stream.signal.reason;
      throw e;
    }
    if (stream.signal.aborted) throw stream.signal.reason;
    return result;
  } finally {
    stream.close();
  }
}

function grant(answer, arrived) {
  const g = {
    resource: answer.resource,
    ttlMs: answer.ttl_ms,
    validityMs: answer.validity_ms,
    validUntil: arrived + answer.validity_ms,
    fence: answer.fence === undefined ? null : answer.fence,
    holdCount: answer.hold_count === undefined ? null : answer.hold_count,
    mode: answer.mode === 'shared' ? 'shared' : 'exclusive',
  };
  // Not enumerable: keeps the token out of console.log and JSON.stringify.
  Object.defineProperty(g, 'token', { value: answer.token, enumerable: false });
  return g;
}

function manyGrant(answer, arrived) {
  const g = {
    resources: answer.resources,
    ttlMs: answer.ttl_ms,
    validityMs: answer.validity_ms,
    validUntil: arrived + answer.validity_ms,
    fence: answer.fence === undefined ? null : answer.fence,
  };
  Object.defineProperty(g, 'token', { value: answer.token, enumerable: false });
  return g;
}

function permitGrant(answer, arrived) {
  const p = {
    semaphore: answer.semaphore,
    permit: answer.permit,
    ttlMs: answer.ttl_ms,
    validityMs: answer.validity_ms,
    validUntil: arrived + answer.validity_ms,
    fence: answer.fence === undefined ? null : answer.fence,
  };
  Object.defineProperty(p, 'token', { value: answer.token, enumerable: false });
  return p;
}

function extended(answer, arrived) {
  return { ttlMs: answer.ttl_ms, validityMs: answer.validity_ms, validUntil: arrived + answer.validity_ms };
}

module.exports = {
  Client,
  Hold,
  Campaign,
  Observer,
  lockPath,
  semaphorePath,
  electionPath,
  multiPath,
  RedlockError,
  ApiError,
  TakenError,
  LostError,
  NoQuorumError,
  LimitMismatchError,
  NoLeaderError,
  UnreachableError,
  LockLostError,
  DEFAULT_TIMEOUT_MS,
};
