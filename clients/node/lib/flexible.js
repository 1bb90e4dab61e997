'use strict';
// A rate-limiter-flexible-style API on the module: consume / reward / block /
// get / delete, and a union of limiters decided by RL.ALL.
//
// rate-limiter-flexible keeps a counter and decides in the client; here the
// module decides. `consume` resolves with a RateLimiterRes, or rejects with one
// when limited (an Error when Redis fails), as rate-limiter-flexible does.

const { RateLimit, engineOptions } = require('./ratelimit');
const { RateLimitUnavailableError } = require('./client');

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

/** Keys blocked in this process until a time (ms), rate-limiter-flexible's BlockedKeys. */
class BlockedKeys {
  constructor() {
    this.keys = new Map(); // key -> until (ms)
  }

  addMs(key, ms) {
    this.keys.set(key, Date.now() + ms);
    if (this.keys.size > 999) {
      const now = Date.now();
      for (const [k, until] of this.keys) if (until <= now) this.keys.delete(k);
    }
  }

  /** ms before the key's block ends; 0: not blocked. */
  msBeforeExpire(key) {
    const until = this.keys.get(key);
    if (until === undefined) return 0;
    const now = Date.now();
    if (until > now) return until - now;
    this.keys.delete(key);
    return 0;
  }

  delete(key) {
    if (key === undefined) this.keys.clear();
    else this.keys.delete(key);
  }
}

/** The longest BLOCK (366 days): block(key, 0), for ever in rate-limiter-flexible. */
const MAX_BLOCK_S = 31_622_400;

const isLimiterLike = (l) => l != null && typeof l.consume === 'function';

/**
 * `new RateLimiterRedisModule({ storeClient, points = 4, duration = 1, blockDuration = 0,
 *   keyPrefix = 'rlflx', algorithm = 'fixedWindow', align = 'first', timeoutMs = 250,
 *   insuranceLimiter, inMemoryBlockOnConsumed = 0, inMemoryBlockDuration = 0,
 *   engine = 'auto', clock = 'auto', logger })`
 * `engine`, `clock`, `logger`: as RateLimit's; `limiter.engine` says which engine decides.
 * `points` per `duration` seconds; the default fixed window starts at the first
 * consume (RL.FIXEDWINDOW … ALIGN FIRST), as rate-limiter-flexible's does.
 * `blockDuration` (s): a refused consume blocks the key that long (BLOCK).
 *
 * With rate-limiter-flexible's meanings:
 * - `insuranceLimiter` (any limiter with its methods, e.g. its RateLimiterMemory):
 *   when Redis cannot decide (RateLimitUnavailableError: timeout, connection,
 *   no module), consume / reward / block / get / delete are asked of it instead,
 *   with the same arguments; it takes this limiter's blockDuration. An error
 *   reply that is a bug (a bad argument) is not hidden behind it.
 * - `inMemoryBlockOnConsumed` (points, ≥ `points`; 0: off): a key that has
 *   consumed that many is blocked in this process, and its consumes are refused
 *   without a Redis call: for `inMemoryBlockDuration` seconds when set (counted
 *   from a refusal), else until a request could pass again (a refusal's
 *   retryAfterMs; the window's end when a fixed window's consume reaches it).
 *   Never longer than the limiter itself refuses, but inMemoryBlockDuration.
 */
class RateLimiterRedisModule {
  constructor(opts = {}) {
    const client = opts.storeClient;
    this.limiter = opts.limiter ?? new RateLimit(client, engineOptions(opts));
    this.points = opts.points ?? 4;
    this.duration = opts.duration ?? 1;
    this.blockDuration = opts.blockDuration ?? 0;
    this.keyPrefix = opts.keyPrefix ?? 'rlflx';
    this.algorithm = opts.algorithm ?? 'fixedWindow';
    this.align = opts.align ?? 'first';
    if (!ALGORITHMS.includes(this.algorithm)) throw new TypeError(`redis-ratelimit-client: algorithm must be one of ${ALGORITHMS.join(', ')}`);
    if (!(this.points >= 1) || !Number.isInteger(this.points)) throw new TypeError('redis-ratelimit-client: points must be an integer >= 1');
    if (!(this.duration > 0)) throw new TypeError('redis-ratelimit-client: duration must be > 0 seconds (a limit that never resets is not supported)');
    this.inMemoryBlockOnConsumed = opts.inMemoryBlockOnConsumed ? Number.parseInt(opts.inMemoryBlockOnConsumed, 10) : 0;
    this.inMemoryBlockDuration = opts.inMemoryBlockDuration ? Number.parseInt(opts.inMemoryBlockDuration, 10) : 0;
    if (this.inMemoryBlockOnConsumed > 0 && this.points > this.inMemoryBlockOnConsumed) {
      throw new TypeError('redis-ratelimit-client: inMemoryBlockOnConsumed must be greater than or equal to points');
    }
    if (this.inMemoryBlockDuration > 0 && !(this.inMemoryBlockOnConsumed > 0)) {
      throw new TypeError('redis-ratelimit-client: inMemoryBlockDuration needs inMemoryBlockOnConsumed');
    }
    this._inMemoryBlockedKeys = new BlockedKeys();
    this.insuranceLimiter = opts.insuranceLimiter;
  }

  /** The engine deciding: 'module', 'functions' or 'eval' (null before the first call). */
  get engine() {
    return this.limiter.engine;
  }

  get insuranceLimiter() {
    return this._insuranceLimiter;
  }

  set insuranceLimiter(value) {
    if (value !== undefined && !isLimiterLike(value)) {
      throw new TypeError('redis-ratelimit-client: insuranceLimiter must be a limiter (consume, reward, block, get, delete)');
    }
    this._insuranceLimiter = value;
    if (value) value.blockDuration = this.blockDuration;
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

  /** RL.ALL takes this limiter: anything but a fixed window aligned on the first consume. */
  get inAll() {
    return !(this.algorithm === 'fixedWindow' && String(this.align).toLowerCase() === 'first');
  }

  /** A RateLimiterRes from a module result; `asked`: the points this call asked for. */
  static toRes(result, asked) {
    const consumed = result.limit - result.remaining;
    const msBeforeNext = result.limited && result.retryAfterMs >= 0 ? result.retryAfterMs : result.resetAfterMs;
    // A refusal took nothing; rate-limiter-flexible would have counted it: report it the same way.
    const consumedPoints = result.limited ? consumed + asked : consumed;
    return new RateLimiterRes(result.remaining, msBeforeNext, consumedPoints, !result.limited && consumed === asked);
  }

  /** ms before the key's in-memory block ends (0: none). */
  getInMemoryBlockMsBeforeExpire(rlKey) {
    return this.inMemoryBlockOnConsumed > 0 ? this._inMemoryBlockedKeys.msBeforeExpire(rlKey) : 0;
  }

  /** Forgets every in-memory block. */
  deleteInMemoryBlockedAll() {
    this._inMemoryBlockedKeys.delete();
  }

  /**
   * After a decision: block the key in memory when it has consumed
   * inMemoryBlockOnConsumed (rate-limiter-flexible's _afterConsume). `res` is
   * changed as that one does (msBeforeNext: the in-memory block's).
   */
  _afterDecision(rlKey, result, res) {
    const threshold = this.inMemoryBlockOnConsumed;
    if (!(threshold > 0) || res.consumedPoints < threshold) return;
    if (this.inMemoryBlockDuration > 0) {
      if (!result.limited) return;
      this._inMemoryBlockedKeys.addMs(rlKey, this.inMemoryBlockDuration * 1000);
      res.msBeforeNext = this.inMemoryBlockDuration * 1000;
      return;
    }
    // Until a request can pass again: a refusal knows when; an allowed consume
    // knows it only for a fixed window (its end).
    let ms = 0;
    if (result.limited) ms = result.retryAfterMs;
    else if (this.algorithm === 'fixedWindow') ms = result.resetAfterMs;
    if (ms > 0) this._inMemoryBlockedKeys.addMs(rlKey, ms);
  }

  /** Redis could not decide: ask the insurance limiter the same, or fail with `err`. */
  _insured(err, method, params) {
    if (!(err instanceof RateLimitUnavailableError) || !this._insuranceLimiter || typeof this._insuranceLimiter[method] !== 'function') throw err;
    return this._insuranceLimiter[method](...params);
  }

  /** Takes `points`; resolves a RateLimiterRes, rejects with one when limited (an Error when Redis fails). */
  async consume(key, points = 1, options = {}) {
    const rlKey = this.getKey(key);
    const blockedMs = this.getInMemoryBlockMsBeforeExpire(rlKey);
    if (blockedMs > 0) throw new RateLimiterRes(0, blockedMs);
    const block = this.blockDuration > 0 ? { block: this.blockDuration } : {};
    let result;
    try {
      result = await this.limiter.check(rlKey, this.spec, { tokens: points, ...block });
    } catch (err) {
      return this._insured(err, 'consume', [key, points, options]);
    }
    const res = RateLimiterRedisModule.toRes(result, points);
    if (result.limited && result.retryAfterMs < 0 && this.blockDuration > 0) {
      // More points than the limiter holds: refused for good, so no BLOCK was
      // set; rate-limiter-flexible blocks the key for blockDuration.
      try {
        await this.block(key, this.blockDuration);
      } catch (err) {
        return this._insured(err, 'consume', [key, points, options]);
      }
      res.msBeforeNext = Math.ceil(this.blockDuration * 1000);
    }
    this._afterDecision(rlKey, result, res);
    if (result.limited) throw res;
    return res;
  }

  /** Gives `points` back (REFUND), never beyond full. */
  async reward(key, points = 1, options = {}) {
    try {
      const result = await this.limiter.check(this.getKey(key), this.spec, { refund: points });
      return RateLimiterRedisModule.toRes(result, 0);
    } catch (err) {
      return this._insured(err, 'reward', [key, points, options]);
    }
  }

  /**
   * Adds `points` whatever the limit says (TOKENS points FORCE), as
   * rate-limiter-flexible's penalty: past the limit the key is in debt, and
   * consumes are refused until it is repaid. Resolves a RateLimiterRes.
   */
  async penalty(key, points = 1, options = {}) {
    try {
      const result = await this.limiter.check(this.getKey(key), this.spec, { tokens: points, force: true });
      return new RateLimiterRes(result.remaining, result.limited && result.retryAfterMs >= 0 ? result.retryAfterMs : result.resetAfterMs,
        result.limit - result.remaining, false);
    } catch (err) {
      return this._insured(err, 'penalty', [key, points, options]);
    }
  }

  /**
   * Blocks the key for exactly `secDuration` seconds, then it is fresh, as
   * rate-limiter-flexible's block (which sets the key to points + 1 for that
   * long): the key deleted, every point taken, a refused call with BLOCK
   * secDuration, the points given back (REFUND) under the block. Four
   * commands, not atomic: a consume between them is refused. `secDuration`
   * 0 (rate-limiter-flexible: for ever) blocks for the longest a BLOCK may
   * last, 366 days.
   */
  async block(key, secDuration, options = {}) {
    const k = this.getKey(key);
    const seconds = Number(secDuration) > 0 ? secDuration : MAX_BLOCK_S;
    try {
      await this.limiter.reset(k);
      await this.limiter.check(k, this.spec, { tokens: this.points });
      await this.limiter.check(k, this.spec, { block: seconds });
      await this.limiter.check(k, this.spec, { refund: this.points });
      return new RateLimiterRes(0, Number(secDuration) > 0 ? Math.ceil(secDuration * 1000) : -1, this.points + 1, false);
    } catch (err) {
      return this._insured(err, 'block', [key, secDuration, options]);
    }
  }

  /** The key's state (PEEK), or null when it has consumed nothing. */
  async get(key, options = {}) {
    let result;
    try {
      result = await this.limiter.check(this.getKey(key), this.spec, { peek: true });
    } catch (err) {
      return this._insured(err, 'get', [key, options]);
    }
    // PEEK answers what taking one more would leave.
    const consumed = result.limited ? result.limit - result.remaining : result.limit - result.remaining - 1;
    if (consumed <= 0) return null;
    const msBeforeNext = result.limited && result.retryAfterMs >= 0 ? result.retryAfterMs : result.resetAfterMs;
    return new RateLimiterRes(result.limited ? 0 : result.remaining + 1, msBeforeNext, consumed, false);
  }

  /** Deletes the key (and its in-memory block): resolves true when there was one. */
  async delete(key, options = {}) {
    const rlKey = this.getKey(key);
    try {
      const deleted = await this.limiter.reset(rlKey);
      this._inMemoryBlockedKeys.delete(rlKey);
      return deleted;
    } catch (err) {
      return this._insured(err, 'delete', [key, options]);
    }
  }
}

/**
 * `new RateLimiterUnion(limiter1, limiter2, …)`: consume from all, all or
 * nothing. Resolves `{ [keyPrefix]: RateLimiterRes }` and rejects with the
 * same shape, for the binding limiter (when refused: the one that refuses the
 * longest; when allowed: the one with the fewest points left). The limiters
 * share one client; the longest blockDuration among them is the BLOCK of each
 * refusing one.
 * - When RL.ALL takes every limiter (no fixed window aligned on the first
 *   consume): one RL.ALL, atomic.
 * - Otherwise (the default fixed window is aligned on the first consume,
 *   which RL.ALL cannot take): each limiter's command in parallel, and when
 *   one refuses (or fails), the points the others took are given back
 *   (REFUND). Not atomic: between the two round trips a concurrent consume may
 *   be refused by points that are then given back (never admitted by them).
 * A key blocked in memory by one of them is refused without a Redis call.
 * When Redis cannot decide and every limiter has an insuranceLimiter, each
 * insurance limiter is consumed, as rate-limiter-flexible's union does.
 */
class RateLimiterUnion {
  constructor(...limiters) {
    if (limiters.length < 2) throw new TypeError('redis-ratelimit-client: RateLimiterUnion needs at least two limiters');
    for (const l of limiters) {
      if (!(l instanceof RateLimiterRedisModule)) throw new TypeError('redis-ratelimit-client: RateLimiterUnion takes RateLimiterRedisModule limiters');
    }
    this.limiters = limiters;
  }

  async consume(key, points = 1) {
    for (const l of this.limiters) {
      const ms = l.getInMemoryBlockMsBeforeExpire(l.getKey(key));
      if (ms > 0) throw { [l.keyPrefix]: new RateLimiterRes(0, ms) };
    }
    const block = Math.max(...this.limiters.map((l) => l.blockDuration || 0));
    const opts = { tokens: points, ...(block > 0 ? { block } : {}) };
    let result;
    let which;
    try {
      ({ result, which } = this.limiters.every((l) => l.inAll) ? await this._all(key, opts) : await this._each(key, opts, points));
    } catch (err) {
      if (!(err instanceof RateLimitUnavailableError) || !this.limiters.every((l) => l.insuranceLimiter)) throw err;
      return this._insured(key, points);
    }
    const binding = this.limiters[which];
    const res = RateLimiterRedisModule.toRes(result, points);
    binding._afterDecision(binding.getKey(key), result, res);
    const out = { [binding.keyPrefix]: res };
    if (result.limited) throw out;
    return out;
  }

  // One RL.ALL.
  async _all(key, opts) {
    const limits = this.limiters.map((l) => ({ ...l.spec, key: l.getKey(key) }));
    const result = await this.limiters[0].limiter.all(limits, opts);
    return { result, which: result.which };
  }

  // Each limiter's own command, in parallel; on a refusal or a failure, the points taken are given back.
  async _each(key, opts, points) {
    const settled = await Promise.allSettled(this.limiters.map((l) => l.limiter.check(l.getKey(key), l.spec, opts)));
    const failed = settled.find((s) => s.status === 'rejected');
    const results = settled.map((s) => (s.status === 'fulfilled' ? s.value : null));
    const refused = results.some((r) => r && r.limited);
    if (failed || refused) {
      await Promise.allSettled(
        this.limiters.map((l, i) =>
          results[i] && !results[i].limited ? l.limiter.check(l.getKey(key), l.spec, { refund: points }) : null,
        ),
      );
    }
    if (failed) throw failed.reason;
    // RL.ALL's binding limit: the refusal that lasts longest (-1, never, the
    // longest), else the fewest remaining; the first on ties.
    const longest = (r) => (r.retryAfterMs < 0 ? Infinity : r.retryAfterMs);
    let which = -1;
    results.forEach((r, i) => {
      if (which === -1) {
        if (!refused || r.limited) which = i;
        return;
      }
      const b = results[which];
      if (refused ? r.limited && longest(r) > longest(b) : r.remaining < b.remaining) which = i;
    });
    return { result: results[which], which };
  }

  // rate-limiter-flexible's union over the insurance limiters: resolves with
  // every result, rejects with the refusing ones.
  async _insured(key, points) {
    const settled = await Promise.all(
      this.limiters.map((l) => l.insuranceLimiter.consume(key, points).then((res) => ({ res }), (rej) => ({ rej }))),
    );
    const refused = settled.some((s) => 'rej' in s);
    const out = {};
    settled.forEach((s, i) => {
      if (refused ? 'rej' in s : true) out[this.limiters[i].keyPrefix] = refused ? s.rej : s.res;
    });
    if (refused) throw out;
    return out;
  }
}

module.exports = { RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes };
