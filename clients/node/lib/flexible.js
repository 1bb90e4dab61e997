'use strict';
// A rate-limiter-flexible-style API on the module: consume / reward / block /
// get / delete, and a union of limiters decided by RL.ALL.
//
// rate-limiter-flexible keeps a counter and decides in the client; here the
// module decides. `consume` resolves with a RateLimiterRes, or rejects with one
// when limited (an Error when Redis fails), as rate-limiter-flexible does.

const { RateLimit } = require('./ratelimit');

/** The shape rate-limiter-flexible resolves and rejects with. */
class RateLimiterRes {
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = isFirstInDuration;
  }

  /** The headers rate-limiter-flexible's docs suggest (Retry-After in seconds). */
  toHeaders(points) {
    return {
      'Retry-After': String(Math.ceil(this.msBeforeNext / 1000)),
      'X-RateLimit-Limit': String(points),
      'X-RateLimit-Remaining': String(this.remainingPoints),
      'X-RateLimit-Reset': new Date(Date.now() + this.msBeforeNext).toISOString(),
    };
  }

  toString() {
    return JSON.stringify(this);
  }

  toJSON() {
    return {
      remainingPoints: this.remainingPoints,
      msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints,
      isFirstInDuration: this.isFirstInDuration,
    };
  }
}

const ALGORITHMS = ['fixedWindow', 'slidingWindow', 'slidingLog', 'gcra', 'tokenBucket'];

/**
 * `new RateLimiterRedisModule({ storeClient, points = 4, duration = 1, blockDuration = 0,
 *   keyPrefix = 'rlflx', algorithm = 'fixedWindow', align = 'first', timeoutMs = 1000 })`
 * `points` per `duration` seconds; the default fixed window starts at the first
 * consume (RL.FIXEDWINDOW … ALIGN FIRST), as rate-limiter-flexible's does.
 * `blockDuration` (s): a refused consume blocks the key that long (BLOCK).
 */
class RateLimiterRedisModule {
  constructor(opts = {}) {
    const client = opts.storeClient;
    this.limiter = opts.limiter ?? new RateLimit(client, { timeoutMs: opts.timeoutMs ?? 1000 });
    this.points = opts.points ?? 4;
    this.duration = opts.duration ?? 1;
    this.blockDuration = opts.blockDuration ?? 0;
    this.keyPrefix = opts.keyPrefix ?? 'rlflx';
    this.algorithm = opts.algorithm ?? 'fixedWindow';
    this.align = opts.align ?? 'first';
    if (!ALGORITHMS.includes(this.algorithm)) throw new TypeError(`redis-ratelimit: algorithm must be one of ${ALGORITHMS.join(', ')}`);
    if (!(this.points >= 1) || !Number.isInteger(this.points)) throw new TypeError('redis-ratelimit: points must be an integer >= 1');
    if (!(this.duration > 0)) throw new TypeError('redis-ratelimit: duration must be > 0 seconds (a limit that never resets is not supported)');
  }

  getKey(key) {
    return `${this.keyPrefix}:${key}`;
  }

  /** The module limit this limiter stands for. */
  get spec() {
    const { points, duration } = this;
    switch (this.algorithm) {
      case 'gcra':
        return { type: 'gcra', maxBurst: points - 1, tokensPerPeriod: points, period: duration };
      case 'tokenBucket':
        return { type: 'tokenBucket', capacity: points, refillTokens: points, refillPeriod: duration };
      case 'fixedWindow':
        return { type: 'fixedWindow', limit: points, window: duration, align: this.align };
      default:
        return { type: this.algorithm, limit: points, window: duration };
    }
  }

  /** A RateLimiterRes from a module result; `asked`: the points this call asked for. */
  static toRes(result, asked) {
    const consumed = result.limit - result.remaining;
    const msBeforeNext = result.limited && result.retryAfterMs >= 0 ? result.retryAfterMs : result.resetAfterMs;
    // A refusal took nothing; rate-limiter-flexible would have counted it: report it the same way.
    const consumedPoints = result.limited ? consumed + asked : consumed;
    return new RateLimiterRes(result.remaining, msBeforeNext, consumedPoints, !result.limited && consumed === asked);
  }

  /** Takes `points`; resolves a RateLimiterRes, rejects with one when limited (an Error when Redis fails). */
  async consume(key, points = 1) {
    const block = this.blockDuration > 0 ? { block: this.blockDuration } : {};
    const result = await this.limiter.check(this.getKey(key), this.spec, { tokens: points, ...block });
    const res = RateLimiterRedisModule.toRes(result, points);
    if (result.limited) throw res;
    return res;
  }

  /** Gives `points` back (REFUND), never beyond full. */
  async reward(key, points = 1) {
    const result = await this.limiter.check(this.getKey(key), this.spec, { refund: points });
    return RateLimiterRedisModule.toRes(result, 0);
  }

  /**
   * Blocks the key for `secDuration` seconds: takes what is left, then a
   * refused call with BLOCK locks it out (two commands; the module blocks
   * only a limiter that refuses).
   */
  async block(key, secDuration) {
    const k = this.getKey(key);
    const opts = { tokens: this.points, block: secDuration };
    let result = await this.limiter.check(k, this.spec, opts);
    if (!result.limited) result = await this.limiter.check(k, this.spec, opts);
    return new RateLimiterRes(0, Math.max(result.retryAfterMs, Math.ceil(secDuration * 1000)), this.points + 1, false);
  }

  /** The key's state (PEEK), or null when it has consumed nothing. */
  async get(key) {
    const result = await this.limiter.check(this.getKey(key), this.spec, { peek: true });
    // PEEK answers what taking one more would leave.
    const consumed = result.limited ? result.limit - result.remaining : result.limit - result.remaining - 1;
    if (consumed <= 0) return null;
    const msBeforeNext = result.limited && result.retryAfterMs >= 0 ? result.retryAfterMs : result.resetAfterMs;
    return new RateLimiterRes(result.limited ? 0 : result.remaining + 1, msBeforeNext, consumed, false);
  }

  /** Deletes the key: resolves true when there was one. */
  async delete(key) {
    return this.limiter.reset(this.getKey(key));
  }
}

/**
 * `new RateLimiterUnion(limiter1, limiter2, …)`: consume from all, all or
 * nothing, in one RL.ALL. Resolves `{ [keyPrefix]: RateLimiterRes }` and
 * rejects with the same shape for the limiter that refused. RL.ALL reports
 * only the binding limit, so the object holds that one limiter. The limiters
 * must share one client; their BLOCK is the longest blockDuration among them;
 * fixed windows must be aligned on the clock (align: 'epoch').
 */
class RateLimiterUnion {
  constructor(...limiters) {
    if (limiters.length < 2) throw new TypeError('redis-ratelimit: RateLimiterUnion needs at least two limiters');
    this.limiters = limiters;
  }

  async consume(key, points = 1) {
    const limits = this.limiters.map((l) => ({ ...l.spec, key: l.getKey(key) }));
    const block = Math.max(...this.limiters.map((l) => l.blockDuration || 0));
    const result = await this.limiters[0].limiter.all(limits, { tokens: points, ...(block > 0 ? { block } : {}) });
    const binding = this.limiters[result.which];
    const out = { [binding.keyPrefix]: RateLimiterRedisModule.toRes(result, points) };
    if (result.limited) throw out;
    return out;
  }
}

module.exports = { RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes };
