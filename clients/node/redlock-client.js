'use strict';
/**
 * A client of the redlock-agent socket API for Node.js 18+, no dependencies.
 *
 * The agent runs beside the application and serves distributed locks
 * (Redlock over N Redis masters) as HTTP/1.1 + JSON on a Unix socket.
 *
 *   const { Client } = require('./redlock-client.js');
 *   const client = new Client('/run/redlock/agent.sock');
 *   await client.using('orders-42', { ttlMs: 10000, waitMs: 5000 }, async (lock, signal) => {
 *     await doTheWork({ signal });   // signal aborts the moment the lock is lost
 *   });                              // released on every master
 *
 * acquire / extend / release map one-to-one to the API. hold() keeps a lock
 * for as long as its connection is open: the agent renews it and streams
 * NDJSON events; the Hold's `signal` (an AbortSignal) aborts with a
 * LockLostError when the agent says `lost`, when the connection ends
 * without a notice, or when no renewal arrived by a twentieth of the last
 * validity before its end (on this process's monotonic clock). using()
 * wraps a hold around a function and rejects with LockLostError if the lock
 * was lost while it ran.
 *
 * Resources are given as they are; they are percent-encoded here, once.
 * `fence: true` asks the agent for a fencing token: the answer's `fence`, a
 * number larger than every earlier grant's, to pass to storage with each write.
 * Times (`validUntil`) are on performance.now()'s clock, in ms.
 */

const http = require('node:http');
const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');

/** Milliseconds a request may take beyond the wait it asks the agent for. */
const DEFAULT_TIMEOUT_MS = 5000;

/** Longest hold event line accepted; real ones are under 200 bytes. */
const MAX_LINE = 64 * 1024;

class RedlockError extends Error {}

/** The agent answered an error: `status`, `code` and the message. */
class ApiError extends RedlockError {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.apiMessage = message;
  }
}

/** 409 `taken`: another holder kept the lock for all of waitMs. */
class TakenError extends ApiError {}
/** 409 `lost`: not extended on a quorum in time; stop using the lock. */
class LostError extends ApiError {}
/**
 * 503 `no_quorum`: fewer than N/2+1 masters usable, or (release) too many
 * failed to tell whether they held the lock; retry later.
 */
class NoQuorumError extends ApiError {}

/**
 * The socket could not be reached, the connection failed, or no answer came
 * in time. For an acquire, the lock may or may not have been granted; it
 * then expires with its TTL.
 */
class UnreachableError extends RedlockError {
  constructor(message, cause) {
    super(message, cause ? { cause } : undefined);
    this.name = 'UnreachableError';
  }
}

/**
 * A held lock was lost. `reason`: the agent's (`renew_failed`, `no_quorum`,
 * `max_hold`, `shutdown`, `force_released`, `node_lost`), `disconnected` or
 * `expired`.
 */
class LockLostError extends RedlockError {
  constructor(resource, reason) {
    super(`the lock on ${resource} was lost: ${reason}`);
    this.name = 'LockLostError';
    this.resource = resource;
    this.reason = reason;
  }
}

const CODES = { taken: TakenError, lost: LostError, no_quorum: NoQuorumError };

function apiError(status, text) {
  let error;
  try {
    error = JSON.parse(text).error;
  } catch (_) {
    error = undefined;
  }
  if (!error || typeof error.code !== 'string') {
    return new UnreachableError(`unexpected answer: ${status} ${text.slice(0, 200)}`);
  }
  const Kind = CODES[error.code] || ApiError;
  const e = new Kind(status, error.code, error.message);
  e.name = Kind.name;
  return e;
}

/**
 * `/v1/locks/{resource}/{action}`, the resource percent-encoded as one path
 * segment (`/` included). The only place resources are encoded.
 */
function lockPath(resource, action) {
  const segment = encodeURIComponent(resource).replace(
    /[!'()*]/g,
    (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase(),
  );
  return `/v1/locks/${segment}/${action}`;
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
      const headers = { host: 'localhost' };
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
   * The lock, if a quorum granted it within waitMs (default: one attempt).
   * ttlMs defaults to the agent's lock.default_ttl; the agent accepts twice
   * lock.node_timeout to lock.max_ttl. Rejects with TakenError,
   * NoQuorumError, ApiError (refused request) or UnreachableError.
   */
  async acquire(resource, { ttlMs, waitMs, owner, fence } = {}) {
    const answer = await this._call(
      'POST',
      lockPath(resource, 'acquire'),
      body({ ttl_ms: ttlMs, wait_ms: waitMs, owner, fence }),
      waitMs,
    );
    return grant(answer, performance.now());
  }

  /** A new TTL from now. Rejects with LostError: stop using the lock. */
  async extend(resource, token, { ttlMs } = {}) {
    const answer = await this._call('POST', lockPath(resource, 'extend'), body({ token, ttl_ms: ttlMs }));
    return {
      ttlMs: answer.ttl_ms,
      validityMs: answer.validity_ms,
      validUntil: performance.now() + answer.validity_ms,
    };
  }

  /**
   * Releases on every master. false means no quorum still held it: it had
   * expired, and the work may have overlapped another holder's. Throws
   * NoQuorumError when too many masters failed to tell (a retry with the
   * same token is safe).
   */
  async release(resource, token) {
    const answer = await this._call('POST', lockPath(resource, 'release'), { token });
    return answer.released;
  }

  /** For operators: deletes the lock on every master, whoever holds it. */
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
   * sent `acquired`. Close it (or release it) to let go.
   */
  async hold(resource, { ttlMs, waitMs, owner, maxHoldMs, fence } = {}) {
    const path = lockPath(resource, 'hold');
    const payload = body({ ttl_ms: ttlMs, wait_ms: waitMs, owner, max_hold_ms: maxHoldMs, fence });
    const { req, res, limit } = await this._send('POST', path, payload, waitMs);
    if (res.statusCode !== 200) {
      const chunks = [];
      for await (const c of res) chunks.push(c);
      throw apiError(res.statusCode, Buffer.concat(chunks).toString('utf8'));
    }
    const lines = new Lines(res);
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
    return new Hold(this, resource, req, lines, first, performance.now());
  }

  /**
   * Runs `fn(lock, signal)` while holding the lock and releases it after.
   * `signal` aborts (reason: a LockLostError) the moment the lock is lost;
   * pass it to what the work awaits. Rejects with that LockLostError if the
   * lock was lost while `fn` ran, even if `fn` finished.
   */
  async using(resource, options, fn) {
    const hold = await this.hold(resource, options);
    try {
      let result;
      try {
        result = await fn(hold, hold.signal);
      } catch (e) {
        if (hold.signal.aborted) throw hold.signal.reason;
        throw e;
      }
      if (hold.signal.aborted) throw hold.signal.reason;
      return result;
    } finally {
      hold.close();
    }
  }
}

function grant(answer, arrived) {
  const g = {
    resource: answer.resource,
    ttlMs: answer.ttl_ms,
    validityMs: answer.validity_ms,
    validUntil: arrived + answer.validity_ms,
    // A fencing token, once the agent issues them; null until then.
    fence: answer.fence === undefined ? null : answer.fence,
  };
  // Not enumerable: keeps the token out of console.log and JSON.stringify.
  Object.defineProperty(g, 'token', { value: answer.token, enumerable: false });
  return g;
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
    this.error = null;
    res.setEncoding('utf8');
    res.on('data', (chunk) => {
      this.buffer += chunk;
      let end;
      while ((end = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + 1);
        this._push(parse(line));
      }
      if (this.buffer.length > MAX_LINE) this._fail(new UnreachableError(`a hold event line over ${MAX_LINE} bytes`));
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
    return new UnreachableError(`not a hold event: ${line.slice(0, 200)}`);
  }
}

/**
 * A held lock, renewed by the agent while open. Emits 'renewed'
 * (validityMs) and 'lost' (LockLostError). `signal` aborts on loss.
 */
class Hold extends EventEmitter {
  constructor(client, resource, req, lines, acquired, arrived) {
    super();
    this.client = client;
    this.resource = resource;
    Object.defineProperty(this, 'token', { value: acquired.token, enumerable: false });
    this.ttlMs = acquired.ttl_ms;
    this.validityMs = acquired.validity_ms;
    this.validUntil = arrived + acquired.validity_ms;
    this.fence = acquired.fence === undefined ? null : acquired.fence;
    this.lostReason = null;
    this._req = req;
    this._closed = false;
    this._controller = new AbortController();
    this.signal = this._controller.signal;
    this._arm();
    this._read(lines);
  }

  /** Throws the LockLostError if the lock is lost. */
  throwIfLost() {
    if (this.signal.aborted) throw this.signal.reason;
  }

  /** Resolves with the LockLostError when the lock is lost. */
  lost() {
    if (this.signal.aborted) return Promise.resolve(this.signal.reason);
    return new Promise((resolve) => {
      this.signal.addEventListener('abort', () => resolve(this.signal.reason), { once: true });
    });
  }

  /**
   * Releases through the API, then closes the hold. true when a quorum
   * still held it (see Client.release).
   */
  async release() {
    try {
      return await this.client.release(this.resource, this.token);
    } finally {
      this.close();
    }
  }

  /** Ends the hold: the connection closes and the agent releases the lock. */
  close() {
    if (this._closed) return;
    this._closed = true;
    clearTimeout(this._timer);
    this._req.destroy();
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
    const error = new LockLostError(this.resource, reason);
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
      if (event.event === 'renewed') {
        this.validityMs = event.validity_ms;
        this.validUntil = performance.now() + event.validity_ms;
        this._arm();
        this.emit('renewed', event.validity_ms);
      } else if (event.event === 'lost') {
        this._lose(event.reason || 'lost');
        return;
      }
    }
  }
}

module.exports = {
  Client,
  Hold,
  lockPath,
  RedlockError,
  ApiError,
  TakenError,
  LostError,
  NoQuorumError,
  UnreachableError,
  LockLostError,
  DEFAULT_TIMEOUT_MS,
};
