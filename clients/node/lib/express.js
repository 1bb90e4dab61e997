'use strict';
// Express (and plain `http`) middleware: per-route rules, a key function,
// fail-open / fail-closed under a command timeout, and a local cache of denials.

const { isIP } = require('node:net');
const { RateLimit, RateLimitResult, engineOptions, parseLimit } = require('./ratelimit');
const { RateLimitUnavailableError } = require('./client');
const { ipKeyGenerator, checkIpv6Subnet, DEFAULT_IPV6_SUBNET } = require('./ip-key');

/**
 * Set-up checks of the default key (express-rate-limit v8's, same conditions):
 * each is made once per middleware, on the first request it applies to, and
 * reported to `logger.error` (a misconfiguration to fix, not a request error).
 * `validate: false` turns them all off; `validate: { trustProxy: false, … }`
 * one by one. `code` names each.
 */
const VALIDATIONS = {
  ip(req, ip) {
    if (ip === undefined || ip === null) {
      return ['ERR_RL_UNDEFINED_IP_ADDRESS', "the request has no IP address (req.ip and req.socket.remoteAddress are undefined): the connection may be gone, or give a 'key' function"];
    }
    if (!isIP(ip)) return ['ERR_RL_INVALID_IP_ADDRESS', `req.ip is not an IP address (${ip}): give a 'key' function`];
    return null;
  },
  trustProxy(req) {
    if (trustProxyOf(req) === true) {
      return ['ERR_RL_PERMISSIVE_TRUST_PROXY', "Express's 'trust proxy' setting is true: req.ip is then the leftmost X-Forwarded-For address, which any client can set, so anyone can escape an IP limit. Trust only your proxies (a hop count or their addresses)"];
    }
    return null;
  },
  xForwardedForHeader(req) {
    if (req.headers?.['x-forwarded-for'] && trustProxyOf(req) === false) {
      return ['ERR_RL_UNEXPECTED_X_FORWARDED_FOR', "the X-Forwarded-For header is set but Express's 'trust proxy' setting is false (the default): every client behind the proxy shares the proxy's address. Set 'trust proxy' to your proxies"];
    }
    return null;
  },
  forwardedHeader(req) {
    if (req.headers?.forwarded && req.ip === req.socket?.remoteAddress) {
      return ['ERR_RL_FORWARDED_HEADER', "the Forwarded header is set but ignored (Express reads X-Forwarded-For only): give a 'key' function that reads it"];
    }
    return null;
  },
};

// Express's 'trust proxy' setting, or undefined outside Express.
function trustProxyOf(req) {
  const app = req.app;
  return app && typeof app.get === 'function' ? app.get('trust proxy') : undefined;
}

function makeValidator(validate, logger) {
  const enabled = typeof validate === 'object' && validate !== null ? { default: true, ...validate } : { default: validate !== false };
  const report = (code, message) => {
    const err = new Error(`redis-ratelimit-client: ${message} (${code}; turn this check off with validate: { ${code in CODE_OPTIONS ? CODE_OPTIONS[code] : 'default'}: false })`);
    err.code = code;
    try {
      logger.error(err);
    } catch {
      // a logger's failure must not fail the request
    }
  };
  return {
    /** Runs check `name` unless disabled or already run. */
    run(name, ...args) {
      if (!(enabled[name] ?? enabled.default)) return;
      enabled[name] = false;
      const found = VALIDATIONS[name](...args);
      if (found) report(...found);
    },
    /** A key function whose source reads req.ip without ipKeyGenerator: IPv6 clients could rotate. */
    keyFunction(fn) {
      if (typeof fn !== 'function' || !(enabled.keyGeneratorIpFallback ?? enabled.default)) return;
      const src = fn.toString();
      if ((src.includes('req.ip') || src.includes('request.ip')) && !src.includes('ipKeyGenerator')) {
        enabled.keyGeneratorIpFallback = false;
        report('ERR_RL_KEY_GEN_IPV6', 'a key function reads req.ip without ipKeyGenerator(): an IPv6 client can change its address within its network and escape the limit. Use ipKeyGenerator(req.ip)');
      }
    },
  };
}

const CODE_OPTIONS = {
  ERR_RL_UNDEFINED_IP_ADDRESS: 'ip',
  ERR_RL_INVALID_IP_ADDRESS: 'ip',
  ERR_RL_PERMISSIVE_TRUST_PROXY: 'trustProxy',
  ERR_RL_UNEXPECTED_X_FORWARDED_FOR: 'xForwardedForHeader',
  ERR_RL_FORWARDED_HEADER: 'forwardedHeader',
  ERR_RL_KEY_GEN_IPV6: 'keyGeneratorIpFallback',
};

/** The default key: the client's IP address, an IPv6 one as its network (ipv6Subnet bits). */
function defaultKeyFor(ipv6Subnet, validator) {
  return (req) => {
    const ip = req.ip ?? req.socket?.remoteAddress;
    validator.run('ip', req, ip);
    validator.run('trustProxy', req);
    validator.run('xForwardedForHeader', req);
    validator.run('forwardedHeader', req);
    if (ip === undefined || ip === null) return 'unknown';
    const subnet = typeof ipv6Subnet === 'function' ? ipv6Subnet(req) : ipv6Subnet;
    if (typeof ipv6Subnet === 'function') checkIpv6Subnet(subnet);
    return ipKeyGenerator(ip, subnet);
  };
}

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
 * - `rules`: [{ name, limit: spec, path?, method?, key?, cost? }] — `limit` a
 *   spec, or the rule syntax of a fixed window ('100/minute',
 *   '1000/month@Europe/Paris': a calendar month in that zone); every rule
 *   whose `path` (prefix string, RegExp, array or function of req) and `method`
 *   match applies; one rule is one command, several are decided together,
 *   all or nothing, with RL.ALL (binding rule in the headers). Or a single
 *   `limit: spec` (+ `name`) for the whole stack;
 * - `key(req)`: the client's identity; null/undefined: not limited. Default:
 *   the client's IP address (req.ip, else the socket's), an IPv6 address as its
 *   /56 network (`ipv6Subnet`), with express-rate-limit v8's set-up checks;
 * - `ipv6Subnet` (default 56; 32..64, false: whole addresses, or (req) => bits):
 *   the network an IPv6 client is limited as, with the default key;
 * - `validate` (default true; false, or { ip, trustProxy, xForwardedForHeader,
 *   forwardedHeader, keyGeneratorIpFallback: false }) and `logger` (default
 *   console): the set-up checks, each reported once to logger.error;
 * - `cost`: tokens per request, a number or (req) => number (default 1);
 * - `charge(req, res)`: the tokens a response cost, known when it is done (an
 *   LLM call's, from a header the handler set): every rule then checks before
 *   the handler (PEEK: refused while spent or in debt) and records that many
 *   with FORCE when the response finishes (or closes), past the limit if need
 *   be (a debt, kept in the cache of denials until repaid); a failure is
 *   reported to `onUnavailable` / logger.warn, never to the request;
 * - `prefix`: Redis key prefix (default 'rl:'); a rule's key is `${prefix}${rule.name}:${key}`;
 * - `failOpen` (default true): when Redis is unavailable (timeout, refused, no module),
 *   let the request through without headers; false: answer 503 with Retry-After;
 * - `timeoutMs` (default 250): the command timeout;
 * - `engine` ('auto' | 'module' | 'functions' | 'eval'; default 'auto') and
 *   `clock` ('auto' | 'server' | 'caller'): as RateLimit's; `middleware.engine`
 *   says which engine decides;
 * - `cacheSize` (default 10000; 0: off): denials kept locally until their retryAfterMs;
 * - `legacyHeaders` (default false): also X-RateLimit-*;
 * - `statusCode` (429), `message` (body), `handler(req, res, next, result)`: the refusal;
 * - `onUnavailable(err, req)`: told of every unavailable-Redis decision (logging).
 * The decision is in `req.rateLimit` (a RateLimitResult) when the module decided.
 * An error thrown (or a promise rejected) by `handler`, `key`, `cost` or by the
 * `next()` it calls goes to `next(err)`, never to an unhandled rejection (as
 * express-rate-limit's handleAsyncErrors).
 */
function rateLimit(options = {}) {
  const limiter = options.limiter ?? new RateLimit(options.client, engineOptions(options));
  const logger = options.logger ?? console;
  const validator = makeValidator(options.validate ?? true, logger);
  const ipv6Subnet = options.ipv6Subnet ?? DEFAULT_IPV6_SUBNET;
  if (typeof ipv6Subnet !== 'function') checkIpv6Subnet(ipv6Subnet);
  const keyOf = options.key ?? defaultKeyFor(ipv6Subnet, validator);
  validator.keyFunction(options.key);
  const prefix = options.prefix ?? 'rl:';
  const failOpen = options.failOpen ?? true;
  const legacy = options.legacyHeaders ?? false;
  const statusCode = options.statusCode ?? 429;
  const message = options.message ?? 'Too Many Requests\n';
  const cache = new DenialCache(options.cacheSize ?? 10000);
  const costOf = typeof options.cost === 'function' ? options.cost : () => options.cost ?? 1;
  const chargeOf = options.charge;
  if (chargeOf !== undefined && typeof chargeOf !== 'function') throw new TypeError('redis-ratelimit-client: charge must be a function (req, res) => tokens');
  const ruleList = options.rules ?? (options.limit ? [{ name: options.name ?? 'default', limit: options.limit }] : null);
  if (!Array.isArray(ruleList) || ruleList.length === 0) throw new TypeError('redis-ratelimit-client: rateLimit() needs `rules` or `limit`');
  const rules = ruleList.map((r, i) => {
    if (!r || !r.limit) throw new TypeError(`redis-ratelimit-client: rule ${i} has no limit`);
    validator.keyFunction(r.key);
    return {
      name: r.name ?? `rule${i}`,
      limit: typeof r.limit === 'string' ? parseLimit(r.limit) : r.limit,
      matches: ((p, m) => (req) => p(req) && m(req))(pathMatcher(r.path), methodMatcher(r.method)),
      key: r.key ?? keyOf,
    };
  });

  async function refuse(req, res, next, result, headers) {
    if (!res.headersSent) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
    if (options.handler) return await options.handler(req, res, next, result);
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

  // One request: match the rules, answer from the cache of denials, or ask Redis.
  async function decide(req, res, next) {
    const active = [];
    for (const rule of rules) {
      if (!rule.matches(req)) continue;
      const id = rule.key(req);
      if (id === undefined || id === null) continue;
      active.push({ rule, key: `${prefix}${rule.name}:${id}` });
    }
    if (active.length === 0) return next();
    const cost = costOf(req);
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
    if (chargeOf) opts.peek = true; // checked now, charged when the response is done
    let result;
    try {
      result =
        active.length === 1
          ? await limiter.check(active[0].key, active[0].rule.limit, { ...opts, name: active[0].rule.name })
          : await limiter.all(
              active.map((a) => ({ ...a.rule.limit, key: a.key, label: a.rule.name })),
              opts,
            );
    } catch (err) {
      if (err instanceof RateLimitUnavailableError) return unavailable(req, res, next, err);
      throw err;
    }
    req.rateLimit = result;
    const headers = result.headers({ legacy });
    if (!result.limited) {
      if (!res.headersSent) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
      if (chargeOf) chargeWhenDone(req, res, active, cacheKey);
      return next();
    }
    if (result.retryAfterMs > 0) cache.set(cacheKey, Date.now() + result.retryAfterMs, result);
    return refuse(req, res, next, result, headers);
  }

  // Charges what the response cost, once, when it finishes (or closes).
  function chargeWhenDone(req, res, active, cacheKey) {
    let done = false;
    const charge = async () => {
      if (done) return;
      done = true;
      const tokens = Number(await chargeOf(req, res));
      if (!(tokens > 0)) return;
      const result =
        active.length === 1
          ? await limiter.charge(active[0].key, active[0].rule.limit, tokens, { name: active[0].rule.name })
          : await limiter.all(active.map((a) => ({ ...a.rule.limit, key: a.key, label: a.rule.name })), { tokens, force: true });
      // In debt: later checks are refused from memory until it is repaid.
      if (result && result.limited && result.retryAfterMs > 0) cache.set(cacheKey, Date.now() + result.retryAfterMs, result);
    };
    const run = () =>
      charge().catch((err) => {
        try {
          if (options.onUnavailable) options.onUnavailable(err, req);
          else (typeof logger.warn === 'function' ? logger.warn : logger.error).call(logger, `redis-ratelimit-client: could not charge a response: ${err && err.message}`);
        } catch {
          // a logger's failure must not fail anything
        }
      });
    res.once('finish', run);
    res.once('close', run);
  }

  // Whatever decide throws or rejects with goes to next(err) (a handler's
  // error, or one thrown by the next middleware through next()): never an
  // unhandled rejection. Returns nothing, so Express 5 does not call next twice.
  function rateLimitMiddleware(req, res, next) {
    decide(req, res, next).catch((err) => {
      try {
        next(err);
      } catch (nextErr) {
        try {
          logger.error(nextErr);
        } catch {
          // nowhere left to report it
        }
      }
    });
  }
  /** The RateLimit it decides with (its timeout, reset(key), raw commands). */
  rateLimitMiddleware.limiter = limiter;
  /** The engine deciding: 'module', 'functions' or 'eval' (null before the first decision). */
  Object.defineProperty(rateLimitMiddleware, 'engine', { get: () => limiter.engine, enumerable: true });
  return rateLimitMiddleware;
}

/**
 * `concurrencyLimit(options)` → `(req, res, next)`: at most `limit` requests
 * in flight per key (RL.CONCURRENCY). Each request takes a slot under a lease
 * of its own (a random id) before `next()`, and gives it back when the
 * response emits `finish` or `close` — exactly once, whichever fires first
 * (both do for a completed response; `close` alone when the client aborts). A
 * request aborted while the slot was being taken gives it back at once and
 * never reaches `next()`. A process that dies holding slots frees them after
 * `lease` seconds.
 *
 * Options (as rateLimit's where the names agree):
 * - `client` (or `limiter`: a RateLimit), `timeoutMs`, `engine`, `clock`;
 * - `limit` (slots, required); `lease` (seconds, default 60): how long a slot
 *   outlives a process that died holding it; `autoRenew` (default false;
 *   true: renew every lease/3 while the response is open; or seconds), for
 *   requests that may outlast `lease`;
 * - `key(req)` (default: the client's IP, an IPv6 one as its network;
 *   null/undefined: not limited), `ipv6Subnet`, `validate`, `logger`;
 * - `cost`: slots per request, a number or (req) => number (default 1);
 * - `prefix` (default 'rl:conc:') and `name` (default 'default'): the key is
 *   `${prefix}${name}:${key}`;
 * - `failOpen` (default true): Redis unavailable: pass without a slot; false: 503;
 * - `statusCode` (429), `message`, `handler(req, res, next, lease)`: the
 *   refusal (Retry-After: 1 by default: a slot frees whenever a request ends);
 * - `onUnavailable(err, req)`: told when Redis cannot decide or a release fails.
 * `req.concurrency` holds the Lease (a RateLimitResult). Errors (a key or cost
 * function, the handler, what next() throws) go to next(err).
 */
function concurrencyLimit(options = {}) {
  const limiter = options.limiter ?? new RateLimit(options.client, engineOptions(options));
  const logger = options.logger ?? console;
  const validator = makeValidator(options.validate ?? true, logger);
  const ipv6Subnet = options.ipv6Subnet ?? DEFAULT_IPV6_SUBNET;
  if (typeof ipv6Subnet !== 'function') checkIpv6Subnet(ipv6Subnet);
  const keyOf = options.key ?? defaultKeyFor(ipv6Subnet, validator);
  validator.keyFunction(options.key);
  if (options.limit === undefined || options.limit === null) throw new TypeError('redis-ratelimit-client: concurrencyLimit() needs `limit` (slots)');
  const params = { limit: options.limit, lease: options.lease ?? 60 };
  const prefix = options.prefix ?? 'rl:conc:';
  const name = options.name ?? 'default';
  const failOpen = options.failOpen ?? true;
  const statusCode = options.statusCode ?? 429;
  const message = options.message ?? 'Too Many Requests\n';
  const costOf = typeof options.cost === 'function' ? options.cost : () => options.cost ?? 1;
  const leaseOptions = { autoRenew: options.autoRenew ?? false, onRenewError: (err) => report(err) };

  function report(err, req) {
    try {
      if (options.onUnavailable) options.onUnavailable(err, req);
      else logger.error(err);
    } catch {
      // a logger's failure must not fail the request
    }
  }

  async function decide(req, res, next) {
    const id = keyOf(req);
    if (id === undefined || id === null) return next();
    const cost = costOf(req);
    // Listen before the slot is asked for: a client that aborts meanwhile is seen.
    let ended = false;
    let lease = null;
    const end = () => {
      if (ended) return;
      ended = true;
      res.removeListener('finish', end);
      res.removeListener('close', end);
      if (lease !== null) lease.release().catch((err) => report(err, req));
    };
    res.once('finish', end);
    res.once('close', end);
    try {
      lease = await limiter.acquire(`${prefix}${name}:${id}`, { ...params, ...leaseOptions, tokens: cost });
    } catch (err) {
      const gone = ended; // the response ended while the slot was asked for
      end();
      if (!(err instanceof RateLimitUnavailableError)) throw err;
      report(err, req);
      if (gone) return undefined;
      if (failOpen) return next();
      res.statusCode = 503;
      res.setHeader('Retry-After', '1');
      res.setHeader('Content-Type', 'text/plain; charset=utf-8');
      return res.end('Service Unavailable\n');
    }
    if (ended) {
      // The response ended (the client went away) while the slot was taken: give it back now.
      lease.release().catch((err) => report(err, req));
      return undefined;
    }
    req.concurrency = lease;
    if (!lease.allowed) {
      end();
      if (options.handler) return await options.handler(req, res, next, lease);
      res.statusCode = statusCode;
      if (!res.headersSent) {
        res.setHeader('Retry-After', '1');
        res.setHeader('Content-Type', 'text/plain; charset=utf-8');
      }
      return res.end(message);
    }
    return next();
  }

  function concurrencyMiddleware(req, res, next) {
    decide(req, res, next).catch((err) => {
      try {
        next(err);
      } catch (nextErr) {
        try {
          logger.error(nextErr);
        } catch {
          // nowhere left to report it
        }
      }
    });
  }
  /** The RateLimit it decides with. */
  concurrencyMiddleware.limiter = limiter;
  /** The engine deciding: 'module', 'functions' or 'eval' (null before the first decision). */
  Object.defineProperty(concurrencyMiddleware, 'engine', { get: () => limiter.engine, enumerable: true });
  return concurrencyMiddleware;
}

module.exports = { rateLimit, concurrencyLimit, DenialCache, ipKeyGenerator };
