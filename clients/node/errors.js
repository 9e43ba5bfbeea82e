'use strict';
/**
 * Every error of the package: the agent's refusals as one class per code a
 * caller branches on, the transport's failures, and a held lock's loss.
 */

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
 * A held lock, permit or leadership was lost. `resource` names it; `reason`: the agent's (`renew_failed`, `no_quorum`,
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

/**
 * 409 `limit_mismatch`: the semaphore's permits are held with another
 * limit; every user of a semaphore must ask with the same one.
 */
class LimitMismatchError extends ApiError {}
/** 404 `no_leader`: no campaigner leads the election now. */
class NoLeaderError extends ApiError {}

const CODES = {
  taken: TakenError,
  lost: LostError,
  no_quorum: NoQuorumError,
  limit_mismatch: LimitMismatchError,
  no_leader: NoLeaderError,
};

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

module.exports = {
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
};
