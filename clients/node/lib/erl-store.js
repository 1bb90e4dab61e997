'use strict';
// An express-rate-limit Store on RL.FIXEDWINDOW.
//
// express-rate-limit counts every hit in a fixed window (denied ones too) and
// decides itself: totalHits > limit → 429. With a numeric `limit` this store
// asks the module instead — `RL.FIXEDWINDOW key limit window` — and reports
//   allowed: totalHits = limit - remaining   (the hits counted, this one included)
//   limited: totalHits = limit + 1           (over: the module counted nothing)
// so express-rate-limit makes the same decision, in one O(1) command with the
// server's clock. The difference: a denied hit is not counted (the module's
// limited calls write nothing), so `req.rateLimit.used` stops at limit + 1,
// and a client that keeps hammering is not charged for its refusals. Under
// skipFailedRequests/skipSuccessfulRequests, a decrement that follows a denied
// increment (in this process) gives nothing back, since nothing was taken.
// With a `limit` function (per request), or `countDenied: true`, the store
// counts every hit as express-rate-limit's own stores do (RL.FIXEDWINDOW with
// the highest limit: a plain counter with its window's reset time).
//
// Windows start at a client's first hit and last windowMs (RL.FIXEDWINDOW …
// ALIGN FIRST), as in express-rate-limit's MemoryStore and rate-limit-redis:
// resetTime is the first hit + windowMs. `align: 'epoch'` cuts windows on the
// clock instead (every client's minute starts at :00).

const { RateLimit, engineOptions } = require('./ratelimit');

// The counter mode's limit: never reached (10^12 hits in one window), and exact in a double.
const COUNT_ALL_LIMIT = 1e12;

class RedisRateLimitStore {
  /**
   * Options: `client` (node-redis or ioredis) or `limiter` (a RateLimit);
   * `prefix` (default 'rl:erl:'); `timeoutMs` (default 250); `countDenied` (default false);
   * `engine` ('auto' | 'module' | 'functions' | 'eval'), `clock`, `logger`: as RateLimit's;
   * `align` (default 'first': a window starts at the client's first hit; 'epoch': on the clock).
   * Set express-rate-limit's `passOnStoreError: true` to fail open when Redis is unavailable.
   * A key keeps the alignment that wrote it until it expires (the module refuses
   * the other one): change `align` together with `prefix`.
   */
  constructor(options = {}) {
    this.limiter = options.limiter ?? new RateLimit(options.client, engineOptions(options));
    this.prefix = options.prefix ?? 'rl:erl:';
    this.align = options.align ?? 'first';
    if (this.align !== 'first' && this.align !== 'epoch') throw new TypeError("redis-ratelimit-client: align must be 'first' or 'epoch'");
    this.countDenied = options.countDenied ?? false;
    this.localKeys = false;
    this.windowMs = 60_000;
    this.limit = undefined;
    this.trackDenied = false;
    this._denied = new Map(); // key -> [until ms, count]: denied increments a decrement must not refund
  }

  /** The engine deciding ('module', 'functions', 'eval'; null before the first call). */
  get engine() {
    return this.limiter.engine;
  }

  /** Called by express-rate-limit with its options (windowMs, limit, skip… flags). */
  init(options) {
    this.windowMs = options.windowMs ?? this.windowMs;
    const limit = options.limit ?? options.max;
    this.limit = typeof limit === 'number' && limit >= 1 && !this.countDenied ? limit : undefined;
    this.trackDenied = Boolean(options.skipFailedRequests || options.skipSuccessfulRequests);
  }

  _key(key) {
    return this.prefix + key;
  }

  _args(key, extra = []) {
    const align = this.align === 'first' ? ['ALIGN', 'FIRST'] : [];
    return ['RL.FIXEDWINDOW', this._key(key), this.limit ?? COUNT_ALL_LIMIT, this.windowMs / 1000, ...extra, ...align];
  }

  async increment(key) {
    const reply = await this.limiter.command(...this._args(key));
    const limit = Number(reply[1]);
    const remaining = Number(reply[2]);
    const resetTime = new Date(Date.now() + Number(reply[4]));
    if (Number(reply[0]) === 1) {
      if (this.trackDenied) this._noteDenied(key, resetTime.getTime());
      return { totalHits: limit + 1, resetTime };
    }
    return { totalHits: limit - remaining, resetTime };
  }

  _noteDenied(key, until) {
    const now = Date.now();
    if (this._denied.size > 10000) for (const [k, v] of this._denied) if (v[0] <= now) this._denied.delete(k);
    const entry = this._denied.get(key);
    if (entry && entry[0] > now) entry[1] += 1;
    else this._denied.set(key, [until, 1]);
  }

  async decrement(key) {
    const entry = this._denied.get(key);
    if (entry) {
      const live = entry[0] > Date.now();
      if (!live || entry[1] <= 1) this._denied.delete(key);
      else entry[1] -= 1;
      if (live) return; // that hit took nothing
    }
    await this.limiter.command(...this._args(key, ['REFUND', 1]));
  }

  /** The current count and reset time, or undefined when the key has none. */
  async get(key) {
    const reply = await this.limiter.command(...this._args(key, ['PEEK']));
    const limit = Number(reply[1]);
    const remaining = Number(reply[2]);
    // PEEK answers what taking one more would leave.
    const totalHits = Number(reply[0]) === 1 ? limit - remaining : limit - remaining - 1;
    if (totalHits <= 0) return undefined;
    return { totalHits, resetTime: new Date(Date.now() + Number(reply[4])) };
  }

  async resetKey(key) {
    this._denied.delete(key);
    await this.limiter.command('DEL', this._key(key));
  }
}

module.exports = { RedisRateLimitStore };
