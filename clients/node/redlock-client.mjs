// The ES module face of redlock-client.js: the same classes, one copy.
import client from './redlock-client.js';

export const {
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
} = client;
export default client;
