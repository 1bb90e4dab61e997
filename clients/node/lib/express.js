'use strict';
// Express (and plain `http`) middleware: per-route rules, a key function,
// fail-open / fail-closed under a command timeout, and a local cache of denials.

const { RateLimit, RateLimitResult } = require('./ratelimit');
const { RateLimitUnavailableError } = require('./client');

const defaultKey = (req) => req.ip ?? req.socket?.remoteAddress ?? 'unknown';

function pathOf(req) {
  if (typeof req.path === 'string') return req.path;
  const url = req.url || '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function pathMatcher(path) {
  if (path === undefined || path === null) return () => true;
  if (path instanceof RegExp) return (req) => path.test(pathOf(req));
  if (typeof path === 'function') return path;
  if (Array.isArray(path)) {
    const ms = path.map(pathMatcher);
    return (req) => ms.some((m) => m(req));
  }
  const prefix = String(path).replace(/\/+$/, '');
  // '/api' matches '/api' and '/api/…', not '/apix'.
  return (req) => {
    const p = pathOf(req);
    return prefix === '' || p === prefix || p.startsWith(prefix + '/');
  };
}

function methodMatcher(method) {
  if (method === undefined || method === null) return () => true;
  const set = new Set((Array.isArray(method) ? method : [method]).map((m) => String(m).toUpperCase()));
  return (req) => set.has(String(req.method).toUpperCase());
}

/** A bounded map key -> {until ms, result} of denials still in force. */
class DenialCache {
  constructor(size) {
    this.size = size;
    this.map = new Map();
  }

  get(key) {
    const hit = this.map.get(key);
    if (!hit) return null;
    const now = Date.now();
    if (hit.until <= now) {
      this.map.delete(key);
      return null;
    }
    return { hit, now };
  }

  set(key, until, result) {
    if (this.size <= 0) return;
    if (this.map.size >= this.size) {
      const now = Date.now();
      for (const [k, v] of this.map) if (v.until <= now) this.map.delete(k);
      for (const k of this.map.keys()) {
        if (this.map.size < this.size) break;
        this.map.delete(k); // the oldest first: a Map keeps insertion order
      }
    }
    this.map.delete(key);
    this.map.set(key, { until, at: Date.now(), result });
  }
}

/**
 * `rateLimit(options)` → `(req, res, next)`.
 *
 * Options:
 * - `client`: node-redis or ioredis client (or `limiter`: a RateLimit instance);
 * - `rules`: [{ name, limit: spec, path?, method?, key?, cost? }] — every rule
 *   whose `path` (prefix string, RegExp, array or function of req) and `method`
 *   match applies; one rule is one command, several are decided together,
 *   all or nothing, with RL.ALL (binding rule in the headers). Or a single
 *   `limit: spec` (+ `name`) for the whole stack;
 * - `key(req)`: the client's identity (default req.ip); null/undefined: not limited;
 * - `cost`: tokens per request, a number or (req) => number (default 1);
 * - `prefix`: Redis key prefix (default 'rl:'); a rule's key is `${prefix}${rule.name}:${key}`;
 * - `failOpen` (default true): when Redis is unavailable (timeout, refused, no module),
 *   let the request through without headers; false: answer 503 with Retry-After;
 * - `timeoutMs` (default 500): the command timeout;
 * - `cacheSize` (default 10000; 0: off): denials kept locally until their retryAfterMs;
 * - `legacyHeaders` (default false): also X-RateLimit-*;
 * - `statusCode` (429), `message` (body), `handler(req, res, next, result)`: the refusal;
 * - `onUnavailable(err, req)`: told of every unavailable-Redis decision (logging).
 * The decision is in `req.rateLimit` (a RateLimitResult) when the module decided.
 */
function rateLimit(options = {}) {
  const limiter = options.limiter ?? new RateLimit(options.client, { timeoutMs: options.timeoutMs ?? 500 });
  const keyOf = options.key ?? defaultKey;
  const prefix = options.prefix ?? 'rl:';
  const failOpen = options.failOpen ?? true;
  const legacy = options.legacyHeaders ?? false;
  const statusCode = options.statusCode ?? 429;
  const message = options.message ?? 'Too Many Requests\n';
  const cache = new DenialCache(options.cacheSize ?? 10000);
  const costOf = typeof options.cost === 'function' ? options.cost : () => options.cost ?? 1;
  const ruleList = options.rules ?? (options.limit ? [{ name: options.name ?? 'default', limit: options.limit }] : null);
  if (!Array.isArray(ruleList) || ruleList.length === 0) throw new TypeError('redis-ratelimit: rateLimit() needs `rules` or `limit`');
  const rules = ruleList.map((r, i) => {
    if (!r || !r.limit) throw new TypeError(`redis-ratelimit: rule ${i} has no limit`);
    return {
      name: r.name ?? `rule${i}`,
      limit: r.limit,
      matches: ((p, m) => (req) => p(req) && m(req))(pathMatcher(r.path), methodMatcher(r.method)),
      key: r.key ?? keyOf,
    };
  });

  function refuse(req, res, next, result, headers) {
    if (!res.headersSent) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
    if (options.handler) return options.handler(req, res, next, result);
    res.statusCode = statusCode;
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end(message);
  }

  function unavailable(req, res, next, err) {
    if (options.onUnavailable) {
      try {
        options.onUnavailable(err, req);
      } catch {
        // a logger's failure must not fail the request
      }
    }
    if (failOpen) return next();
    res.statusCode = 503;
    res.setHeader('Retry-After', '1');
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end('Service Unavailable\n');
  }

  return function rateLimitMiddleware(req, res, next) {
    let active;
    let cost;
    try {
      active = [];
      for (const rule of rules) {
        if (!rule.matches(req)) continue;
        const id = rule.key(req);
        if (id === undefined || id === null) continue;
        active.push({ rule, key: `${prefix}${rule.name}:${id}` });
      }
      if (active.length === 0) return next();
      cost = costOf(req);
    } catch (err) {
      return next(err);
    }
    const cacheKey = `${cost}|${active.map((a) => a.key).join('\n')}`;
    const cached = cache.get(cacheKey);
    if (cached) {
      // Answer from memory: the same headers, times moved on.
      const { hit, now } = cached;
      const elapsed = now - hit.at;
      const r = new RateLimitResult(
        [1, hit.result.limit, hit.result.remaining, hit.until - now, Math.max(0, hit.result.resetAfterMs - elapsed)],
        { name: hit.result.name, windowS: hit.result.windowS },
      );
      r.cached = true;
      req.rateLimit = r;
      return refuse(req, res, next, r, r.headers({ legacy }));
    }
    const opts = cost === 1 ? {} : { tokens: cost };
    const decision =
      active.length === 1
        ? limiter.check(active[0].key, active[0].rule.limit, { ...opts, name: active[0].rule.name })
        : limiter.all(
            active.map((a) => ({ ...a.rule.limit, key: a.key, label: a.rule.name })),
            opts,
          );
    decision.then(
      (result) => {
        req.rateLimit = result;
        const headers = result.headers({ legacy });
        if (!result.limited) {
          if (!res.headersSent) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
          return next();
        }
        if (result.retryAfterMs > 0) cache.set(cacheKey, Date.now() + result.retryAfterMs, result);
        return refuse(req, res, next, result, headers);
      },
      (err) => {
        if (err instanceof RateLimitUnavailableError) return unavailable(req, res, next, err);
        return next(err);
      },
    );
  };
}

module.exports = { rateLimit, DenialCache };
