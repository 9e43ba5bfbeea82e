'use strict';
/**
 * The streams of redlock-client.js: an NDJSON body split into events, and
 * the open streams the agent renews or feeds (Hold, Campaign, Observer),
 * each with its loss as an AbortSignal, events and a promise.
 */

const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');
const { UnreachableError, LockLostError } = require('./errors.js');

/** Longest stream event line accepted; real ones are under 200 bytes. */
const MAX_LINE = 64 * 1024;

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
 * A held lock, permit or lock on several resources, renewed by the agent
 * while open: `resource` (the lock, the semaphore, or the resources joined
 * by commas), `resources` (the sorted names of a lock on several, else
 * null), `permit` (null but for a permit), `token`, `fence`, `holdCount`
 * (after a re-entry), `mode` (`shared` for a reader's hold, else
 * `exclusive`),
 * `ttlMs`, `validityMs`, `validUntil`. Emits 'renewed' (validityMs) and
 * 'lost' (LockLostError); `signal` aborts on loss.
 */
class Hold extends Stream {
  constructor(client, resource, req, lines, acquired, arrived, resources, mode) {
    super(resource, req);
    this.client = client;
    this.resource = resource;
    this.resources = resources || null;
    this.permit = acquired.permit === undefined ? null : acquired.permit;
    Object.defineProperty(this, 'token', { value: acquired.token, enumerable: false });
    this.ttlMs = acquired.ttl_ms;
    this.validityMs = acquired.validity_ms;
    this.validUntil = arrived + acquired.validity_ms;
    this.fence = acquired.fence === undefined ? null : acquired.fence;
    this.holdCount = acquired.hold_count === undefined ? null : acquired.hold_count;
    // The `acquired` event does not say; a hold is granted in the mode it asked for.
    this.mode = mode === 'shared' ? 'shared' : 'exclusive';
    this._arm();
    this._read(lines);
  }

  /**
   * Releases through the API, then closes the hold. true when a quorum
   * still held it (see Client.release). A hold that re-entered a lock
   * (`holdCount` set) is only closed: its close is its release, which
   * lowers the count once (a release through the API as well would lower
   * it twice, and release the lock its first acquire still holds); true
   * unless it was lost.
   */
  async release() {
    if (this.holdCount !== null) {
      const held = this.lostReason === null;
      this.close();
      return held;
    }
    try {
      if (this.resources !== null) return await this.client.releaseMany(this.token);
      if (this.permit === null) return await this.client.release(this.resource, this.token);
      return await this.client.releasePermit(this.resource, this.token);
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

module.exports = { Lines, Hold, Campaign, Observer, leader, withTimeout };
