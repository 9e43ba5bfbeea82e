// Types of redlock-client.js: the agent's socket API for Node.js 18+.
/// <reference types="node" />

import { EventEmitter } from 'node:events';

/** Milliseconds a request may take beyond the wait it asks the agent for. */
export const DEFAULT_TIMEOUT_MS: number;

/** Every error of this package. */
export class RedlockError extends Error {}

/** The agent answered an error: `status`, `code` and the agent's message. */
export class ApiError extends RedlockError {
  constructor(status: number, code: string, message: string);
  readonly status: number;
  /** `taken`, `lost`, `no_quorum`, `limit_mismatch`, `no_leader`, `invalid_request`, ... */
  readonly code: string;
  readonly apiMessage: string;
}
/** 409 `taken`: held by another (every permit, for a semaphore) for all of waitMs. */
export class TakenError extends ApiError {}
/** 409 `lost`: not extended on a quorum in time; stop using the lock. */
export class LostError extends ApiError {}
/** 503 `no_quorum`: fewer than N/2+1 masters usable; retry later. */
export class NoQuorumError extends ApiError {}
/** 409 `limit_mismatch`: the semaphore's permits are held with another limit. */
export class LimitMismatchError extends ApiError {}
/** 404 `no_leader`: no campaigner leads the election now. */
export class NoLeaderError extends ApiError {}
/** The socket could not be reached, the connection failed, or no answer came in time. */
export class UnreachableError extends RedlockError {
  constructor(message: string, cause?: unknown);
}
/**
 * A held lock, permit or leadership was lost. `reason`: the agent's
 * (`renew_failed`, `no_quorum`, `max_hold`, `shutdown`, `force_released`,
 * `node_lost`), `disconnected`, `expired`, or (a campaign) `resigned`.
 */
export class LockLostError extends RedlockError {
  constructor(resource: string, reason: string);
  readonly resource: string;
  readonly reason: string;
}

export interface ClientOptions {
  /** Bound on each request beyond the wait it asks for (default 5000). */
  timeoutMs?: number;
}

export interface AcquireOptions {
  ttlMs?: number;
  waitMs?: number;
  owner?: string;
  /** Ask for a fencing token: the answer's `fence`. */
  fence?: boolean;
}

/**
 * How a lock is held: `exclusive` (one holder, the default) or `shared` (a
 * reader: any number at once, while no exclusive holder is there).
 */
export type Mode = 'exclusive' | 'shared';

export interface LockAcquireOptions extends AcquireOptions {
  /** Re-enter a lock this process holds, with its token (and the mode it was granted in). */
  token?: string;
  /** `shared` for a reader; `exclusive` (the default) otherwise. Any other value is a TypeError. */
  mode?: Mode;
}

export interface PermitHoldOptions extends AcquireOptions {
  maxHoldMs?: number;
  /** `release` (default): released when the connection ends; `expire`: left to expire. */
  onDisconnect?: 'release' | 'expire';
}

export interface HoldOptions extends PermitHoldOptions {
  /** Re-enter a lock this process holds while the hold lasts. */
  token?: string;
  /** As LockAcquireOptions' `mode`. */
  mode?: Mode;
}

export interface CampaignOptions {
  ttlMs?: number;
  owner?: string;
  /** Published to everyone who asks who leads; up to 1024 bytes. */
  value?: string;
  maxHoldMs?: number;
}

/** Times are on performance.now()'s clock, in ms. */
export interface Grant {
  resource: string;
  /** Not enumerable: stays out of console.log and JSON.stringify. */
  readonly token: string;
  ttlMs: number;
  validityMs: number;
  validUntil: number;
  fence: number | null;
  /** Set after a re-entry: releases before the lock is released on the masters. */
  holdCount: number | null;
  /** `shared` for a reader's grant. */
  mode: Mode;
}

/** A lock on several resources: all of them under one token and one fence. */
export interface ManyGrant {
  /** Sorted. */
  resources: string[];
  /** Extends and releases every resource. Not enumerable. */
  readonly token: string;
  ttlMs: number;
  validityMs: number;
  validUntil: number;
  fence: number | null;
}

export interface Permit {
  semaphore: string;
  /** 0 to limit-1: which permit; the token alone extends and releases it. */
  permit: number;
  readonly token: string;
  ttlMs: number;
  validityMs: number;
  validUntil: number;
  fence: number | null;
}

export interface Extended {
  ttlMs: number;
  validityMs: number;
  validUntil: number;
}

export interface Leader {
  election: string;
  /** The leadership's fence: larger than every earlier term. */
  term: number | null;
  value: string | null;
  owner: string | null;
  agent: string | null;
  pid: number | null;
  uid: number | null;
  /** When it was elected, ms since the Unix epoch. */
  sinceMs: number | null;
  validityMs: number;
}

/** A stream the agent renews; `signal` aborts with a LockLostError on loss. */
declare class Stream extends EventEmitter {
  readonly signal: AbortSignal;
  lostReason: string | null;
  validityMs: number | null;
  validUntil: number | null;
  throwIfLost(): void;
  lost(): Promise<LockLostError>;
  close(): void;
  on(event: 'renewed', listener: (validityMs: number) => void): this;
  on(event: 'lost', listener: (error: LockLostError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A held lock, permit or lock on several resources, renewed by the agent while open. */
export class Hold extends Stream {
  readonly client: Client;
  /** The lock's resource, the semaphore's name, or the resources joined by commas. */
  readonly resource: string;
  /** The sorted resources of a lock on several; null for a lock or permit. */
  readonly resources: string[] | null;
  /** Which permit, for a semaphore's hold; null for a lock. */
  readonly permit: number | null;
  readonly token: string;
  readonly ttlMs: number;
  validityMs: number;
  validUntil: number;
  readonly fence: number | null;
  /** After a re-entry (`token`): releases before the lock is released on the masters. */
  readonly holdCount: number | null;
  /** `shared` for a reader's hold; `exclusive` otherwise (permits and locks on several too). */
  readonly mode: Mode;
  release(): Promise<boolean>;
}

/** A campaign for an election's leadership, open until closed. */
export class Campaign extends Stream {
  readonly client: Client;
  readonly election: string;
  /** Set once elected. */
  term: number | null;
  ttlMs: number | null;
  /** The leader the agent last named while this one waited. */
  leader: Leader | null;
  readonly isLeader: boolean;
  /** The term once this campaigner leads; rejects if the campaign ended first. */
  elected(): Promise<number>;
  resign(): void;
  on(event: 'waiting', listener: (leader: Leader | null) => void): this;
  on(event: 'elected', listener: (term: number) => void): this;
  on(event: 'renewed', listener: (validityMs: number) => void): this;
  on(event: 'lost', listener: (error: LockLostError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** The leader now and every change; null when no one leads. */
export class Observer implements AsyncIterable<Leader | null> {
  [Symbol.asyncIterator](): AsyncIterator<Leader | null>;
  close(): void;
}

export class Client {
  constructor(socketPath: string, options?: ClientOptions);
  readonly socketPath: string;
  readonly timeoutMs: number;

  acquire(resource: string, options?: LockAcquireOptions): Promise<Grant>;
  extend(resource: string, token: string, options?: { ttlMs?: number }): Promise<Extended>;
  release(resource: string, token: string): Promise<boolean>;
  /** Operators, on the admin socket. */
  forceRelease(resource: string): Promise<{ deleted: number; failed: string[] }>;
  nodes(): Promise<any>;
  locks(): Promise<any>;
  hold(resource: string, options?: HoldOptions): Promise<Hold>;
  using<T>(resource: string, options: HoldOptions, fn: (lock: Hold, signal: AbortSignal) => Promise<T> | T): Promise<T>;

  /** 2 to 32 distinct resources, all granted or none, under one token. */
  acquireMany(resources: string[], options?: AcquireOptions): Promise<ManyGrant>;
  /** `resources`: only through an agent that did not grant the token. */
  extendMany(token: string, options?: { ttlMs?: number; resources?: string[] }): Promise<Extended>;
  releaseMany(token: string, options?: { resources?: string[] }): Promise<boolean>;
  holdMany(resources: string[], options?: PermitHoldOptions): Promise<Hold>;
  usingMany<T>(
    resources: string[],
    options: PermitHoldOptions,
    fn: (lock: Hold, signal: AbortSignal) => Promise<T> | T,
  ): Promise<T>;

  acquirePermit(name: string, limit: number, options?: AcquireOptions): Promise<Permit>;
  /** The permit's token alone names it. */
  extendPermit(name: string, token: string, options?: { ttlMs?: number }): Promise<Extended>;
  /** The older form, with the permit's number: still accepted. */
  extendPermit(name: string, permit: number, token: string, options?: { ttlMs?: number }): Promise<Extended>;
  releasePermit(name: string, token: string): Promise<boolean>;
  releasePermit(name: string, permit: number, token: string): Promise<boolean>;
  holdPermit(name: string, limit: number, options?: PermitHoldOptions): Promise<Hold>;
  usingPermit<T>(
    name: string,
    limit: number,
    options: PermitHoldOptions,
    fn: (permit: Hold, signal: AbortSignal) => Promise<T> | T,
  ): Promise<T>;
  semaphore(name: string): Promise<any>;

  campaign(name: string, options?: CampaignOptions): Promise<Campaign>;
  lead<T>(name: string, options: CampaignOptions, fn: (campaign: Campaign, signal: AbortSignal) => Promise<T> | T): Promise<T>;
  leader(name: string): Promise<Leader>;
  observe(name: string): Promise<Observer>;
}

export function lockPath(resource: string, action: string): string;
export function semaphorePath(name: string, action?: string): string;
export function electionPath(name: string, action?: string): string;
/** `/v1/locks/{action}`: a lock on several resources, named in the body. */
export function multiPath(action: string): string;
