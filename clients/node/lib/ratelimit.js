'use strict';
// Typed calls of the module's commands: one method per command, each resolving
// to a RateLimitResult {limited, limit, remaining, retryAfterMs, resetAfterMs, which?}.

const { senderFor, primariesOf, withTimeout } = require('./client');
const { Engine } = require('./engine');
const { RateLimitResult, applyBlock } = require('./result');
const concurrency = require('./concurrency');

/**
 * Limit specifications, the same words as the commands' parameters (periods
 * and windows in seconds, fractions allowed):
 *   { type: 'gcra', maxBurst, tokensPerPeriod, period }
 *   { type: 'tokenBucket', capacity, refillTokens, refillPeriod }
 *   { type: 'leakyBucket', capacity, leakTokens, leakPeriod }       (not in RL.ALL)
 *   { type: 'fixedWindow', limit, window, align?: 'epoch' | 'first' } (align 'first': not in RL.ALL)
 *   { type: 'slidingWindow', limit, window, buckets? }              (buckets: not in RL.ALL)
 *   { type: 'slidingLog', limit, window }
 *   { type: 'policy', name }                                         (a server-side policy: RL.LIMIT)
 * Any spec may carry `label`: its name in the headers (default: the type, or the policy's name).
 */
const SPECS = {
  gcra: { command: 'RL.GCRA', word: 'GCRA', params: ['maxBurst', 'tokensPerPeriod', 'period'] },
  tokenBucket: { command: 'RL.TOKENBUCKET', word: 'TOKENBUCKET', params: ['capacity', 'refillTokens', 'refillPeriod'] },
  leakyBucket: { command: 'RL.LEAKYBUCKET', word: null, params: ['capacity', 'leakTokens', 'leakPeriod'] },
  fixedWindow: { command: 'RL.FIXEDWINDOW', word: 'FIXEDWINDOW', params: ['limit', 'window'] },
  slidingWindow: { command: 'RL.SLIDINGWINDOW', word: 'SLIDINGWINDOW', params: ['limit', 'window'] },
  slidingLog: { command: 'RL.SLIDINGLOG', word: 'SLIDINGLOG', params: ['limit', 'window'] },
  policy: { command: 'RL.LIMIT', word: 'POLICY', params: ['name'] },
};

const POLICY_WINDOW_TTL_MS = 60_000;

/**
 * The calendar windows of RL.FIXEDWINDOW (`window: 'month'`, `tz: 'Europe/Paris'`)
 * and their nominal length in seconds (the `w` of RateLimit-Policy: a month, or
 * a day with a daylight-saving change, is not always that long; the server's
 * resetAfterMs is exact).
 */
const CALENDAR = { DAY: 86400, WEEK: 604800, MONTH: 2592000, YEAR: 31536000 };
const calendarOf = (spec) => (typeof spec.window === 'string' && CALENDAR[spec.window.toUpperCase()] ? spec.window.toUpperCase() : null);

/** The words of a spec's parameters: `limit MONTH [TZ zone]` for a calendar window. */
function paramWords(spec, def = specOf(spec)) {
  const calendar = calendarOf(spec);
  if (spec.tz !== undefined && spec.tz !== null && !calendar) {
    throw new TypeError("redis-ratelimit-client: tz takes a calendar window (window: 'day', 'week', 'month' or 'year')");
  }
  if (!calendar) return def.params.map((p) => spec[p]);
  if (spec.type !== 'fixedWindow') throw new TypeError(`redis-ratelimit-client: a '${spec.type}' window is a number of seconds`);
  return [spec.limit, calendar, ...(spec.tz ? ['TZ', spec.tz] : [])];
}

const UNIT_SECONDS = { second: 1, sec: 1, s: 1, minute: 60, min: 60, m: 60, hour: 3600, h: 3600, day: 86400, d: 86400, week: 604800, w: 604800, month: 0, year: 0, y: 0 };
const CALENDAR_UNIT = { day: 'day', d: 'day', week: 'week', w: 'week', month: 'month', year: 'year', y: 'year' };

/**
 * A fixed window from the rule syntax `'<n>/<unit>'` (or `'<n> per <unit>'`,
 * `'<n>/<k> <units>'`): '100/minute' is { type: 'fixedWindow', limit: 100,
 * window: 60 }; day, week, month and year are calendar windows, in UTC or in the
 * zone after '@': '1000/month@Europe/Paris'. '10/2 days' is 172,800 seconds.
 */
function parseLimit(text) {
  const m = /^\s*(\d+)\s*(?:\/|per\s)\s*(\d+)?\s*([a-z]+?)s?\s*(?:@\s*(\S+))?\s*$/i.exec(String(text));
  const unit = m ? m[3].toLowerCase() : '';
  if (!m || !(unit in UNIT_SECONDS)) {
    throw new TypeError(`redis-ratelimit-client: a limit is '<n>/<unit>' (second, minute, hour, day, week, month, year), optionally '@<time zone>' for a calendar unit, not ${JSON.stringify(text)}`);
  }
  const [n, k, zone] = [Number(m[1]), Number(m[2] ?? 1), m[4]];
  if (k === 1 && CALENDAR_UNIT[unit]) return { type: 'fixedWindow', limit: n, window: CALENDAR_UNIT[unit], ...(zone ? { tz: zone } : {}) };
  if (zone) throw new TypeError(`redis-ratelimit-client: '@${zone}' takes one calendar unit (day, week, month, year): ${JSON.stringify(text)}`);
  if (UNIT_SECONDS[unit] === 0) throw new TypeError(`redis-ratelimit-client: months and years are calendar windows of one unit: ${JSON.stringify(text)}`);
  return { type: 'fixedWindow', limit: n, window: k * UNIT_SECONDS[unit] };
}

function specOf(spec) {
  const def = spec && SPECS[spec.type];
  if (!def) {
    throw new TypeError(`redis-ratelimit-client: unknown limit type ${JSON.stringify(spec && spec.type)} (known: ${Object.keys(SPECS).join(', ')})`);
  }
  for (const p of def.params) {
    if (spec[p] === undefined || spec[p] === null || spec[p] === '') {
      throw new TypeError(`redis-ratelimit-client: a '${spec.type}' limit needs '${p}'`);
    }
  }
  return def;
}

/**
 * The window in seconds in which `limit` tokens are replenished (the `w` of
 * RateLimit-Policy), or undefined when unknown.
 */
function windowSeconds(spec, limit) {
  const n = (x) => Number(x);
  switch (spec && spec.type) {
    case 'gcra':
      return Math.ceil((limit * n(spec.period)) / n(spec.tokensPerPeriod));
    case 'tokenBucket':
      return Math.ceil((limit * n(spec.refillPeriod)) / n(spec.refillTokens));
    case 'leakyBucket':
      return Math.ceil((limit * n(spec.leakPeriod)) / n(spec.leakTokens));
    case 'fixedWindow':
    case 'slidingWindow':
    case 'slidingLog':
      return calendarOf(spec) ? CALENDAR[calendarOf(spec)] : Math.ceil(n(spec.window));
    default:
      return undefined;
  }
}

const POLICY_KINDS = ['GCRA', 'TOKENBUCKET', 'LEAKYBUCKET', 'FIXEDWINDOW', 'SLIDINGWINDOW', 'SLIDINGLOG'];

/**
 * The spec a server-side policy stands for, from `RL.POLICY GET`'s words
 * (`[kind, p1, p2(, p3)] …`); undefined for no words (no such policy). Throws
 * a TypeError naming the words on a kind this client does not know (a newer
 * module's): upgrade redis-ratelimit-client.
 */
function specFromPolicyWords(words) {
  if (words === null || words === undefined) return undefined;
  const w = Array.isArray(words) ? words.map((x) => String(x)) : [String(words)];
  const [kind = '', a, b, c] = w;
  const unknown = () =>
    new TypeError(
      `redis-ratelimit-client: RL.POLICY GET replied with an algorithm this client does not know: ${JSON.stringify(w.join(' '))} ` +
        `(known: ${POLICY_KINDS.join(', ')}); upgrade redis-ratelimit-client`,
    );
  const arity = ['FIXEDWINDOW', 'SLIDINGWINDOW', 'SLIDINGLOG'].includes(kind.toUpperCase()) ? 2 : 3;
  if (w.length < 1 + arity) throw unknown();
  switch (kind.toUpperCase()) {
    case 'GCRA':
      return { type: 'gcra', maxBurst: a, tokensPerPeriod: b, period: c };
    case 'TOKENBUCKET':
      return { type: 'tokenBucket', capacity: a, refillTokens: b, refillPeriod: c };
    case 'LEAKYBUCKET':
      return { type: 'leakyBucket', capacity: a, leakTokens: b, leakPeriod: c };
    case 'FIXEDWINDOW':
      if (CALENDAR[String(b).toUpperCase()]) {
        const zoned = String(c ?? '').toUpperCase() === 'TZ' && w[4] !== undefined;
        return { type: 'fixedWindow', limit: a, window: String(b).toLowerCase(), ...(zoned ? { tz: w[4] } : {}) };
      }
      return { type: 'fixedWindow', limit: a, window: b };
    case 'SLIDINGWINDOW':
      return { type: 'slidingWindow', limit: a, window: b };
    case 'SLIDINGLOG':
      return { type: 'slidingLog', limit: a, window: b };
    default:
      throw unknown();
  }
}

/**
 * The option words: TOKENS n | REFUND n, FORCE (the cost recorded whatever the
 * limit says: past it, a debt), PEEK, BLOCK seconds. `inAll`: RL.ALL, whose
 * FORCE follows each limit instead.
 */
function optionArgs({ tokens, refund, peek, block, force } = {}, { allowBlock = true, inAll = false } = {}) {
  const args = [];
  if (tokens !== undefined && refund !== undefined) throw new TypeError('redis-ratelimit-client: tokens and refund exclude each other');
  if (force && (peek || refund !== undefined)) throw new TypeError('redis-ratelimit-client: force records a cost: it takes neither peek nor refund');
  if (tokens !== undefined && tokens !== 1) args.push('TOKENS', tokens);
  if (refund !== undefined) args.push('REFUND', refund);
  if (force && !inAll) args.push('FORCE');
  if (peek) args.push('PEEK');
  if (block !== undefined && block !== null && block !== 0) {
    if (!allowBlock) throw new TypeError('redis-ratelimit-client: block belongs to the policy (RL.POLICY SET … BLOCK)');
    args.push('BLOCK', block);
  }
  return args;
}

/**
 * The default command timeout of every entry point (RateLimit, the middleware,
 * the express-rate-limit Store, the rate-limiter-flexible-style limiters): a
 * decision that Redis has not given within 250 ms is "unavailable" (fail open
 * or closed), so a hung Redis adds at most that to a request.
 */
const DEFAULT_TIMEOUT_MS = 250;

/** RateLimit's options from an entry point's: timeoutMs, engine, clock, logger. */
function engineOptions({ timeoutMs = DEFAULT_TIMEOUT_MS, engine, clock, logger }) {
  return { timeoutMs, engine, clock, logger };
}

/**
 * The client of the limiters. `client`: node-redis (v4/v5, client or cluster),
 * ioredis (Redis or Cluster), or a function (args) => Promise. Options:
 * - `timeoutMs` (default 250; 0: none) — a command that has not answered by
 *   then rejects with RateLimitUnavailableError (reason 'timeout'); a client
 *   that is not connected rejects at once (reason 'connection');
 * - `engine` (default 'auto'): 'module' (the RL.* commands), 'functions' (the
 *   Functions library by FCALL, loaded when absent or older), 'eval' (the same
 *   code by EVALSHA); 'auto' takes the module when the server has it, else
 *   the library, else EVALSHA. `limiter.engine` says which is in use;
 * - `clock` (default 'auto'): whose clock the library reads — the server's
 *   (TIME), or the caller's (`NOW`) where the server refuses TIME in scripts
 *   (logged once to `logger.warn`); 'server' or 'caller' forces one;
 * - `logger`: `logger.info` is told once which engine this client settled on;
 *   `logger.warn` once of a fall back to EVALSHA (why, and the remedy). By
 *   default warnings go to console.warn and the info line nowhere (pass
 *   `logger: console` to see it).
 */
class RateLimit {
  constructor(client, { timeoutMs = DEFAULT_TIMEOUT_MS, engine = 'auto', clock = 'auto', logger, now } = {}) {
    this.timeoutMs = timeoutMs;
    this._engine = new Engine(senderFor(client), { engine, clock, logger, now, primaries: primariesOf(client) });
    this.send = withTimeout((args) => this._engine.call(args), timeoutMs);
    this._ready = withTimeout(() => this._engine.ready(), timeoutMs);
    this._policyWindows = new Map(); // policy name -> { windowS, until }
    this._logger = logger ?? console;
  }

  /**
   * The engine deciding: 'module', 'functions' or 'eval'; null until the
   * first decision (or `ready()`) has found it.
   */
  get engine() {
    return this._engine.name;
  }

  /** Finds the engine now (loading the library if needed); resolves to its name. */
  ready() {
    return this._ready(['engine detection']);
  }

  /** Any command, raw reply (errors classified, timeout applied). */
  command(...args) {
    return this.send(args);
  }

  async _decide(args, meta) {
    return new RateLimitResult(await this.send(args), meta);
  }

  /** RL.GCRA key max_burst tokens_per_period period. */
  gcra(key, maxBurst, tokensPerPeriod, period, opts = {}) {
    return this.check(key, { type: 'gcra', maxBurst, tokensPerPeriod, period }, opts);
  }

  /** RL.TOKENBUCKET key capacity refill_tokens refill_period. */
  tokenBucket(key, capacity, refillTokens, refillPeriod, opts = {}) {
    return this.check(key, { type: 'tokenBucket', capacity, refillTokens, refillPeriod }, opts);
  }

  /** RL.LEAKYBUCKET key capacity leak_tokens leak_period (retryAfterMs when allowed: the delay before the work). */
  leakyBucket(key, capacity, leakTokens, leakPeriod, opts = {}) {
    return this.check(key, { type: 'leakyBucket', capacity, leakTokens, leakPeriod }, opts);
  }

  /**
   * RL.FIXEDWINDOW key limit window [ALIGN FIRST when opts.align === 'first'];
   * `window` 'day', 'week', 'month' or 'year': a calendar window in `opts.tz` (UTC).
   */
  fixedWindow(key, limit, window, opts = {}) {
    return this.check(key, { type: 'fixedWindow', limit, window, align: opts.align, tz: opts.tz }, opts);
  }

  /** RL.SLIDINGWINDOW key limit window [BUCKETS opts.buckets]. */
  slidingWindow(key, limit, window, opts = {}) {
    return this.check(key, { type: 'slidingWindow', limit, window, buckets: opts.buckets }, opts);
  }

  /** RL.SLIDINGLOG key limit window. */
  slidingLog(key, limit, window, opts = {}) {
    return this.check(key, { type: 'slidingLog', limit, window }, opts);
  }

  /** RL.LIMIT key policy (a server-side policy). Options: tokens, refund, peek (no block). */
  limit(policy, key, opts = {}) {
    return this.check(key, { type: 'policy', name: policy }, opts);
  }

  /** The args of one limit's own command. */
  static commandArgs(key, spec, opts = {}) {
    const def = specOf(spec);
    if (spec.type === 'policy') return [def.command, key, spec.name, ...optionArgs(opts, { allowBlock: false })];
    const args = [def.command, key, ...paramWords(spec, def), ...optionArgs(opts)];
    if (spec.type === 'fixedWindow' && spec.align) args.push('ALIGN', String(spec.align).toUpperCase());
    if (spec.type === 'slidingWindow' && spec.buckets) args.push('BUCKETS', spec.buckets);
    return args;
  }

  /** One limit given as a spec object (see SPECS). `opts.name` names it in the headers. */
  async check(key, spec, opts = {}) {
    let args;
    try {
      args = RateLimit.commandArgs(key, spec, opts);
    } catch (err) {
      return Promise.reject(err);
    }
    const name = opts.name ?? spec.label ?? (spec.type === 'policy' ? spec.name : spec.type);
    if (spec.type === 'policy') {
      const [reply, windowS] = await Promise.all([this.send(args), this._policyWindow(spec.name)]);
      return new RateLimitResult(reply, { name, windowS });
    }
    const reply = await this.send(args);
    const result = new RateLimitResult(reply, { name });
    result.windowS = windowSeconds(spec, result.limit);
    applyBlock(result, opts);
    return result;
  }

  // The window of a policy (for RateLimit-Policy's w), from RL.POLICY GET, kept a minute.
  async _policyWindow(name) {
    const cached = this._policyWindows.get(name);
    if (cached && cached.until > Date.now()) return cached.windowS;
    let windowS;
    try {
      const spec = specFromPolicyWords(await this.send(['RL.POLICY', 'GET', name]));
      // Soft policies report the nominal limit; the window comes from the nominal parameters.
      if (spec) windowS = windowSeconds(spec, Number(spec.limit ?? spec.capacity ?? Number(spec.maxBurst) + 1));
    } catch (err) {
      // The decision stands; only the header's w is unknown. An algorithm
      // this client does not know is said (once a minute per policy).
      if (err instanceof TypeError) (typeof this._logger.warn === 'function' ? this._logger.warn : this._logger.error).call(this._logger, err.message);
      windowS = undefined;
    }
    this._policyWindows.set(name, { windowS, until: Date.now() + POLICY_WINDOW_TTL_MS });
    return windowS;
  }

  /**
   * RL.ALL: several limits, all or nothing. `limits`: [{ key, type, …params }]
   * (no leakyBucket, no fixedWindow align 'first', no slidingWindow buckets),
   * and `{ key, type: 'concurrency', limit, lease, id }`: a lease taken only
   * when every limit allows (released with release(key, id, { limit, lease })).
   * `result.which` is the index of the binding limit in `limits`.
   */
  async all(limits, opts = {}) {
    if (!Array.isArray(limits) || limits.length === 0) throw new TypeError('redis-ratelimit-client: all() needs a non-empty array of limits');
    const keys = [];
    const words = [];
    for (const l of limits) {
      if (l && l.type === 'concurrency') {
        // CONCURRENCY limit lease ACQUIRE id: a slot taken only when every limit allows
        // (give it back with release(key, id, { limit, lease })).
        for (const p of ['limit', 'lease', 'id']) {
          if (l[p] === undefined || l[p] === null || l[p] === '') throw new TypeError(`redis-ratelimit-client: a 'concurrency' limit of all() needs '${p}'`);
        }
        keys.push(l.key);
        words.push('CONCURRENCY', l.limit, l.lease, 'ACQUIRE', l.id);
        continue;
      }
      const def = specOf(l);
      if (!def.word) throw new TypeError(`redis-ratelimit-client: a '${l.type}' limit cannot be part of RL.ALL`);
      if (l.type === 'fixedWindow' && l.align && String(l.align).toLowerCase() !== 'epoch') {
        throw new TypeError("redis-ratelimit-client: RL.ALL takes fixed windows aligned on the clock only (align 'epoch')");
      }
      if (l.type === 'slidingWindow' && l.buckets) throw new TypeError('redis-ratelimit-client: RL.ALL takes sliding windows without buckets');
      keys.push(l.key);
      words.push(def.word, ...paramWords(l, def));
      if (opts.force) words.push('FORCE');
    }
    const reply = await this.send(['RL.ALL', limits.length, ...keys, ...words, ...optionArgs(opts, { inAll: true })]);
    const result = new RateLimitResult(reply, { keys });
    applyBlock(result, opts);
    const binding = limits[result.which];
    if (binding) {
      result.name = opts.name ?? binding.label ?? (binding.type === 'policy' ? binding.name : binding.type);
      result.windowS = binding.type === 'policy' ? await this._policyWindow(binding.name) : windowSeconds(binding, result.limit);
    }
    return result;
  }

  /**
   * RL.POLICY GET name as a spec ({ type, …params }, see SPECS), or undefined
   * when there is no such policy. Rejects with a TypeError on an algorithm
   * this client does not know. Needs the module (policies are module data).
   */
  async policy(name) {
    return specFromPolicyWords(await this.send(['RL.POLICY', 'GET', name]));
  }

  /**
   * Records `cost` tokens on `key` whatever the limit says (TOKENS cost
   * FORCE): a cost known only after the work (an LLM call's tokens). Past the
   * limit the limiter goes into debt: the result is limited (`remaining` 0,
   * `retryAfterMs` until one more token is admitted) and later calls are
   * refused until the debt is repaid. `cost` 0 or less: nothing sent, null.
   */
  async charge(key, spec, cost, opts = {}) {
    if (!(Number(cost) > 0)) return null;
    return this.check(key, spec, { ...opts, tokens: cost, force: true });
  }

  /** DEL key: resets a limiter. Resolves to true when there was one. */
  async reset(key) {
    return Number(await this.send(['DEL', key])) === 1;
  }
}

// Concurrency limits (RL.CONCURRENCY): acquire() → Lease, renew(), release() (lib/concurrency.js).
Object.assign(RateLimit.prototype, concurrency.methods);

module.exports = { RateLimit, RateLimitResult, parseLimit, windowSeconds, specOf, specFromPolicyWords, SPECS, optionArgs, applyBlock, DEFAULT_TIMEOUT_MS, engineOptions };
