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
 * acquire / extend / release map one-to-one to the API, as do the semaphore
 * calls (acquirePermit, extendPermit, releasePermit, holdPermit,
 * usingPermit) and the election calls (campaign, lead, leader, observe). hold() keeps a lock
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
 * Times (`validUntil`) are on performance.now()'s clock, in ms.
 *
 * Layout: this file (the client, holds, campaigns, observers), errors.js
 * (every error class and the agent's codes), trace.js (the caller's trace
 * context as request headers).
 */

const http = require('node:http');
const { EventEmitter } = require('node:events');
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

/** Milliseconds a request may take beyond the wait it asks the agent for. */
const DEFAULT_TIMEOUT_MS = 5000;

/** Longest hold event line accepted; real ones are under 200 bytes. */
const MAX_LINE = 64 * 1024;

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

function segment(name) {
  return encodeURIComponent(name).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

function body(fields) {
  const out = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null) out[k] = v;
  return out;
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
  async _hold(path, name, payload, waitMs) {
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
    return new Hold(this, name, req, lines, first, performance.now());
  }

  // Locks.

  /**
   * The lock, if a quorum granted it within waitMs (default: one attempt).
   * ttlMs defaults to the agent's lock.default_ttl; the agent accepts twice
   * lock.node_timeout to lock.max_ttl. `token` re-enters a lock this
   * process holds: the same token, and `holdCount` releases before it is
   * released on the masters. Rejects with TakenError, NoQuorumError,
   * ApiError (refused request) or UnreachableError.
   */
  async acquire(resource, { ttlMs, waitMs, owner, fence, token } = {}) {
    const answer = await this._call(
      'POST',
      lockPath(resource, 'acquire'),
      body({ ttl_ms: ttlMs, wait_ms: waitMs, owner, fence, token }),
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
   * then lowers the count as a release does).
   */
  hold(resource, { ttlMs, waitMs, owner, maxHoldMs, fence, onDisconnect, token } = {}) {
    const payload = body({
      ttl_ms: ttlMs,
      wait_ms: waitMs,
      owner,
      max_hold_ms: maxHoldMs,
      fence,
      on_disconnect: onDisconnect,
      token,
    });
    return this._hold(lockPath(resource, 'hold'), resource, payload, waitMs);
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

  /** A new TTL from now for a permit. Rejects with LostError: stop using it. */
  async extendPermit(name, permit, token, { ttlMs } = {}) {
    const answer = await this._call('POST', semaphorePath(name, 'extend'), body({ permit, token, ttl_ms: ttlMs }));
    return extended(answer, performance.now());
  }

  /** Releases a permit on every master; false as release(). */
  async releasePermit(name, permit, token) {
    const answer = await this._call('POST', semaphorePath(name, 'release'), { permit, token });
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
  };
  // Not enumerable: keeps the token out of console.log and JSON.stringify.
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

/** A Leader as the agent tells it, in this client's names; absent fields null. */
function leader(answer) {
  const or = (v) => (v === undefined ? null : v);
  return {
    election: answer.election,
    term: or(answer.term),
    value: or(answer.value),
    owner: or(answer.owner),
    agent: or(answer.agent),
    pid: or(answer.pid),
    uid: or(answer.uid),
    sinceMs: or(answer.since_ms),
    validityMs: answer.validity_ms,
  };
}

function withTimeout(promise, ms, onTimeout) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new UnreachableError(`no answer within ${ms} ms`));
    }, ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Splits a streamed body into NDJSON events; next() is null at the end. */
class Lines {
  constructor(res) {
    this.buffer = '';
    this.queue = [];
    this.waiting = null;
    this.ended = false;
    res.setEncoding('utf8');
    res.on('data', (chunk) => {
      this.buffer += chunk;
      let end;
      while ((end = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + 1);
        this._push(parse(line));
      }
      if (this.buffer.length > MAX_LINE) this._fail(new UnreachableError(`a stream line over ${MAX_LINE} bytes`));
    });
    res.on('end', () => this._end());
    res.on('close', () => this._end());
    res.on('error', (e) => this._fail(new UnreachableError(e.message, e)));
  }

  _push(item) {
    if (this.waiting) {
      const { resolve, reject } = this.waiting;
      this.waiting = null;
      if (item instanceof Error) reject(item);
      else resolve(item);
    } else this.queue.push(item);
  }

  _end() {
    if (this.ended) return;
    this.ended = true;
    this._push(null);
  }

  _fail(e) {
    if (this.ended) return;
    this.ended = true;
    this._push(e);
  }

  next() {
    if (this.queue.length > 0) {
      const item = this.queue.shift();
      return item instanceof Error ? Promise.reject(item) : Promise.resolve(item);
    }
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }
}

function parse(line) {
  try {
    return JSON.parse(line);
  } catch (_) {
    return new UnreachableError(`not a stream event: ${line.slice(0, 200)}`);
  }
}

/**
 * An open stream the agent renews (a hold, a campaign): `signal` aborts
 * with a LockLostError on loss; 'renewed' and 'lost' events.
 */
class Stream extends EventEmitter {
  constructor(name, req) {
    super();
    this._name = name;
    this._req = req;
    this._closed = false;
    this._controller = new AbortController();
    this.signal = this._controller.signal;
    this.lostReason = null;
    this.validityMs = null;
    this.validUntil = null;
  }

  /** Throws the LockLostError if it is lost. */
  throwIfLost() {
    if (this.signal.aborted) throw this.signal.reason;
  }

  /** Resolves with the LockLostError when it is lost. */
  lost() {
    if (this.signal.aborted) return Promise.resolve(this.signal.reason);
    return new Promise((resolve) => {
      this.signal.addEventListener('abort', () => resolve(this.signal.reason), { once: true });
    });
  }

  /** Ends the stream: the connection closes and the agent releases (or resigns). */
  close() {
    if (this._closed) return;
    this._closed = true;
    clearTimeout(this._timer);
    this._req.destroy();
  }

  _renewed(validityMs) {
    this.validityMs = validityMs;
    this.validUntil = performance.now() + validityMs;
    this._arm();
  }

  // Lost when no renewal arrived by a twentieth of the last validity before its
  // end (the agent or its host is frozen).
  _arm() {
    clearTimeout(this._timer);
    const left = this.validUntil - this.validityMs / 20 - performance.now();
    this._timer = setTimeout(() => this._lose('expired'), Math.max(0, left));
  }

  _lose(reason) {
    if (this._closed || this.signal.aborted) return;
    this.lostReason = reason;
    const error = new LockLostError(this._name, reason);
    this.close();
    this._controller.abort(error);
    this.emit('lost', error);
  }

  async _read(lines) {
    for (;;) {
      let event;
      try {
        event = await lines.next();
      } catch (e) {
        this._lose(`disconnected (${e.message})`);
        return;
      }
      if (this._closed) return;
      if (event === null) {
        this._lose('disconnected');
        return;
      }
      if (event.event === 'lost') {
        this._lose(event.reason || 'lost');
        return;
      }
      this._event(event);
    }
  }

  _event(event) {
    if (event.event === 'renewed') {
      this._renewed(event.validity_ms);
      this.emit('renewed', event.validity_ms);
    }
  }
}

/**
 * A held lock or permit, renewed by the agent while open: `resource` (the
 * lock, or the semaphore), `permit` (null for a lock), `token`, `fence`,
 * `holdCount` (after a re-entry),
 * `ttlMs`, `validityMs`, `validUntil`. Emits 'renewed' (validityMs) and
 * 'lost' (LockLostError); `signal` aborts on loss.
 */
class Hold extends Stream {
  constructor(client, resource, req, lines, acquired, arrived) {
    super(resource, req);
    this.client = client;
    this.resource = resource;
    this.permit = acquired.permit === undefined ? null : acquired.permit;
    Object.defineProperty(this, 'token', { value: acquired.token, enumerable: false });
    this.ttlMs = acquired.ttl_ms;
    this.validityMs = acquired.validity_ms;
    this.validUntil = arrived + acquired.validity_ms;
    this.fence = acquired.fence === undefined ? null : acquired.fence;
    this.holdCount = acquired.hold_count === undefined ? null : acquired.hold_count;
    this._arm();
    this._read(lines);
  }

  /**
   * Releases through the API, then closes the hold. true when a quorum
   * still held it (see Client.release).
   */
  async release() {
    try {
      if (this.permit === null) return await this.client.release(this.resource, this.token);
      return await this.client.releasePermit(this.resource, this.permit, this.token);
    } finally {
      this.close();
    }
  }
}

/**
 * A campaign for an election's leadership, open until closed. `leader` is
 * the leader the agent last named while this one waited; once elected,
 * `term` (the leadership's fence: pass it with every write the leader
 * makes), `validityMs` and `validUntil`. Emits 'waiting' (leader or null),
 * 'elected' (term), 'renewed' and 'lost'; `signal` aborts when the
 * leadership is lost, or when the stream ends before close() (not on
 * close() or resign()).
 */
class Campaign extends Stream {
  constructor(client, election, req, lines) {
    super(election, req);
    this.client = client;
    this.election = election;
    this.term = null;
    this.ttlMs = null;
    this.leader = null;
    this._elected = new Promise((resolve, reject) => {
      this._resolveElected = resolve;
      this._rejectElected = reject;
    });
    // Handled here so a campaign closed before it leads is no unhandled rejection.
    this._elected.catch(() => {});
    this.signal.addEventListener('abort', () => this._rejectElected(this.signal.reason), { once: true });
    this._read(lines);
  }

  /** Elected and not lost. */
  get isLeader() {
    return this.term !== null && !this.signal.aborted && !this._closed;
  }

  /**
   * Resolves with the term once this campaigner leads; rejects with a
   * LockLostError if the campaign ended first.
   */
  elected() {
    return this._elected;
  }

  /** Gives up the leadership (or stops waiting): close(). */
  resign() {
    this.close();
  }

  close() {
    if (!this._closed && !this.signal.aborted) {
      this._rejectElected(new LockLostError(this.election, 'resigned'));
    }
    super.close();
  }

  _event(event) {
    if (event.event === 'waiting') {
      this.leader = event.leader ? leader(event.leader) : null;
      this.emit('waiting', this.leader);
    } else if (event.event === 'elected') {
      this.term = event.term;
      this.ttlMs = event.ttl_ms;
      this._renewed(event.validity_ms);
      this._resolveElected(event.term);
      this.emit('elected', event.term);
    } else super._event(event);
  }
}

/**
 * The leader of an election and every change, as an async iterator: each
 * a leader or null (no leader). close() ends it.
 */
class Observer {
  constructor(req, lines) {
    this._req = req;
    this._lines = lines;
  }

  async *[Symbol.asyncIterator]() {
    try {
      for (;;) {
        let event;
        try {
          event = await this._lines.next();
        } catch (_) {
          return;
        }
        if (event === null) return;
        yield event.event === 'leader' ? leader(event) : null;
      }
    } finally {
      this.close();
    }
  }

  close() {
    this._req.destroy();
  }
}

module.exports = {
  Client,
  Hold,
  Campaign,
  Observer,
  lockPath,
  semaphorePath,
  electionPath,
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
