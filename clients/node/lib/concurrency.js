'use strict';
// Concurrency limits with leases (issue 32): RL.CONCURRENCY key limit lease
// ACQUIRE id | RENEW id | RELEASE id, through whichever engine the client
// picked (the module, or the Functions library's rl_concurrency). A Lease is
// the result of an ACQUIRE (a RateLimitResult) that knows how to give its
// slots back (release(), once) and to keep them (renew(), by hand or on a
// timer for work that may outlast the lease).

const crypto = require('node:crypto');
const { RateLimitResult, applyBlock } = require('./result');

/** The lease parameters every RL.CONCURRENCY call carries: `limit` slots, `lease` seconds. */
function leaseParams(opts, what) {
  const { limit, lease } = opts ?? {};
  if (limit === undefined || limit === null || limit === '') throw new TypeError(`redis-ratelimit-client: ${what} needs 'limit' (slots)`);
  if (lease === undefined || lease === null || lease === '') throw new TypeError(`redis-ratelimit-client: ${what} needs 'lease' (seconds)`);
  return { limit, lease };
}

function checkId(id, what) {
  if (typeof id !== 'string' || id === '') throw new TypeError(`redis-ratelimit-client: ${what} needs a lease id (a non-empty string)`);
  return id;
}

/** The words of one RL.CONCURRENCY call. */
function concurrencyArgs(key, { limit, lease }, op, id, { tokens, peek, block } = {}) {
  const args = ['RL.CONCURRENCY', key, limit, lease, op, id];
  if (tokens !== undefined && tokens !== 1) args.push('TOKENS', tokens);
  if (peek) args.push('PEEK');
  if (block !== undefined && block !== null && block !== 0) args.push('BLOCK', block);
  return args;
}

/** The auto-renew period (ms) for a lease of `leaseS` seconds: `autoRenew` seconds, or a third of the lease. */
function renewPeriodMs(autoRenew, leaseS) {
  const seconds = autoRenew === true ? Number(leaseS) / 3 : Number(autoRenew);
  if (!(seconds > 0) || !Number.isFinite(seconds)) {
    throw new TypeError(`redis-ratelimit-client: autoRenew must be true or a positive number of seconds, not ${JSON.stringify(autoRenew)}`);
  }
  return Math.max(1, Math.round(seconds * 1000));
}

/**
 * The result of `RateLimit.acquire()`: a RateLimitResult (`allowed`,
 * `limited`, `limit`, `remaining` free slots, `retryAfterMs`, `resetAfterMs`)
 * and the lease it took when allowed (`key`, `id`, `tokens`, `leaseSeconds`).
 * - `release()`: gives the slots back (RELEASE id). Idempotent: the first call
 *   sends it and every later call returns the same promise; resolves to the
 *   RELEASE's result (what is free), or null when nothing was held (a refused
 *   or PEEK acquire). A failed RELEASE (Redis unavailable) may be called again;
 *   the lease frees itself after `leaseSeconds` anyway.
 * - `renew()`: extends the lease to now + leaseSeconds (RENEW id). A result
 *   with `limited` true means the lease was not held any more (expired or
 *   released): `lost` becomes true and auto-renew stops.
 * - with `autoRenew`, a timer (unref'd: it keeps no process alive) renews
 *   every third of the lease until release() or the lease is lost.
 */
class Lease extends RateLimitResult {
  constructor(reply, limiter, key, params, id, { tokens = 1, peek = false, autoRenew = false, onLost, onRenewError } = {}) {
    super(reply, { name: 'concurrency' });
    const hidden = (name, value) => Object.defineProperty(this, name, { value, enumerable: false, writable: true });
    hidden('_limiter', limiter);
    hidden('_params', params);
    hidden('_release', null);
    hidden('_timer', null);
    hidden('_renewing', false);
    hidden('_onLost', onLost);
    hidden('_onRenewError', onRenewError);
    /** The limiter's key. */
    this.key = key;
    /** The lease id (given, or a random UUID). */
    this.id = id;
    /** The slots this lease holds when allowed. */
    this.tokens = tokens;
    /** The lease time in seconds: the slots free themselves that long after the last acquire or renew. */
    this.leaseSeconds = Number(params.lease);
    /** release() was called. */
    this.released = false;
    /** A renew found the lease gone (expired or released elsewhere). */
    this.lost = false;
    hidden('_peek', Boolean(peek));
    if (autoRenew && this.held) this._startAutoRenew(renewPeriodMs(autoRenew, params.lease));
  }

  /** The lease holds its slots: allowed, not a PEEK, not released, not lost. */
  get held() {
    return this.allowed && !this._peek && !this.released && !this.lost;
  }

  /** RELEASE id, once (see the class). */
  release() {
    if (this._release !== null) return this._release;
    this.stopAutoRenew();
    if (!this.allowed || this._peek) {
      this._release = Promise.resolve(null);
      return this._release;
    }
    this.released = true;
    this._release = this._limiter.release(this.key, this.id, this._params).catch((err) => {
      this._release = null; // may be tried again
      throw err;
    });
    return this._release;
  }

  /** RENEW id: resolves to its result; `limited` true: the lease was lost. */
  async renew() {
    const result = await this._limiter.renew(this.key, this.id, this._params);
    if (result.limited && !this.released && !this.lost && this.allowed && !this._peek) {
      this.lost = true;
      this.stopAutoRenew();
      if (typeof this._onLost === 'function') {
        try {
          this._onLost(result, this);
        } catch {
          // the callback's failure must not become an unhandled rejection
        }
      }
    }
    return result;
  }

  /** Stops the auto-renew timer (release() does it too). */
  stopAutoRenew() {
    if (this._timer !== null) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  _startAutoRenew(periodMs) {
    this._timer = setInterval(() => {
      if (this._renewing || !this.held) return;
      this._renewing = true;
      this.renew()
        .catch((err) => {
          // Redis unavailable for a moment: the next tick tries again (two
          // thirds of the lease are left at the first miss).
          if (typeof this._onRenewError === 'function') {
            try {
              this._onRenewError(err, this);
            } catch {
              // nowhere left to report it
            }
          }
        })
        .finally(() => {
          this._renewing = false;
        });
    }, periodMs);
    if (typeof this._timer.unref === 'function') this._timer.unref();
  }
}

/**
 * RateLimit's concurrency methods (installed on its prototype by
 * lib/ratelimit.js): acquire → Lease, renew and release by id → RateLimitResult.
 */
const methods = {
  /**
   * RL.CONCURRENCY key limit lease ACQUIRE id [TOKENS n] [PEEK] [BLOCK s].
   * `opts`: `limit` (slots), `lease` (seconds), `id` (default a random UUID),
   * `tokens` (slots, default 1), `peek`, `block` (seconds), `autoRenew` (true:
   * every lease/3; or seconds), `onLost(result, lease)` (auto-renew found the
   * lease gone), `onRenewError(err, lease)` (an auto-renew call failed).
   * Resolves to a Lease; a refusal is a Lease with `allowed` false (nothing
   * taken) and `retryAfterMs` (until the earliest lease could expire; -1: never,
   * tokens > limit). Rejects as every call (RateLimitUnavailableError, …).
   */
  async acquire(key, opts = {}) {
    const params = leaseParams(opts, 'acquire()');
    const id = opts.id === undefined ? crypto.randomUUID() : checkId(opts.id, 'acquire()');
    if (opts.autoRenew) renewPeriodMs(opts.autoRenew, params.lease); // a bad option fails before anything is taken
    const reply = await this.send(concurrencyArgs(key, params, 'ACQUIRE', id, opts));
    const lease = new Lease(reply, this, key, params, id, opts);
    applyBlock(lease, opts);
    return lease;
  },

  /** RL.CONCURRENCY key limit lease RENEW id [PEEK]: `limited` true when the lease is not held. */
  async renew(key, id, opts = {}) {
    const params = leaseParams(opts, 'renew()');
    checkId(id, 'renew()');
    return new RateLimitResult(await this.send(concurrencyArgs(key, params, 'RENEW', id, { peek: opts.peek })), { name: 'concurrency' });
  },

  /** RL.CONCURRENCY key limit lease RELEASE id [PEEK]: what is free after it (an unknown id is no error). */
  async release(key, id, opts = {}) {
    const params = leaseParams(opts, 'release()');
    checkId(id, 'release()');
    return new RateLimitResult(await this.send(concurrencyArgs(key, params, 'RELEASE', id, { peek: opts.peek })), { name: 'concurrency' });
  },
};

module.exports = { Lease, methods, concurrencyArgs };
