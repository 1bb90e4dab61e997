'use strict';
// Rate limiting an HTTP endpoint with the redis-ratelimit module (ioredis).
//
// `RateLimiter.check(key, cost)` calls RL.GCRA and turns its reply into an
// HTTP decision: the status (200 or 429) and the headers to send, in two
// styles since the IETF draft still moves:
//   IETF (draft-ietf-httpapi-ratelimit-headers-10):
//     RateLimit-Policy: "<name>";q=<limit>;w=<window s>
//     RateLimit: "<name>";r=<remaining>;t=<seconds>, where t is when more
//     quota comes: retry_after on a refusal that can pass later (so that
//     Retry-After is never earlier than t), else the time until full
//   legacy: X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset.
// A refused request also gets Retry-After (seconds, rounded up). A request
// that can never pass (cost above the limit: retry_after -1) gets 429
// without Retry-After: retrying cannot help.
//
// When Redis cannot be reached the limiter fails open (the request passes,
// without rate-limit headers) or closed (503), as configured. Keys known to
// be limited are kept in a small local cache until their retry_after has
// passed, so a flood of refused requests does not reach Redis.

class RateLimiter {
  constructor(client, { name, maxBurst, perPeriod, period, failOpen = true, cacheSize = 10000 }) {
    Object.assign(this, { client, name, maxBurst, perPeriod, period, failOpen, cacheSize });
    this.limitedUntil = new Map(); // key -> Date.now() until which it is limited
  }

  policy(limit) {
    const window = Math.ceil((limit * this.period) / this.perPeriod);
    return `"${this.name}";q=${limit};w=${window}`;
  }

  cached(key) {
    const until = this.limitedUntil.get(key);
    if (until === undefined) return null;
    const now = Date.now();
    if (until <= now) {
      this.limitedUntil.delete(key);
      return null;
    }
    const retry = Math.max(1, Math.ceil((until - now) / 1000));
    return { allowed: false, status: 429, headers: { 'Retry-After': String(retry) }, cached: true };
  }

  remember(key, retryAfterMs) {
    if (this.limitedUntil.size >= this.cacheSize) {
      const now = Date.now();
      for (const [k, t] of this.limitedUntil) if (t <= now) this.limitedUntil.delete(k);
      // Still full: drop the oldest entries (a Map keeps insertion order).
      for (const k of this.limitedUntil.keys()) {
        if (this.limitedUntil.size < this.cacheSize) break;
        this.limitedUntil.delete(k);
      }
    }
    this.limitedUntil.set(key, Date.now() + retryAfterMs);
  }

  async check(key, cost = 1) {
    const cached = this.cached(key);
    if (cached) return cached;
    let reply;
    try {
      reply = await this.client.call('RL.GCRA', key, this.maxBurst, this.perPeriod, this.period, 'TOKENS', cost);
    } catch (err) {
      if (err && err.name === 'ReplyError') throw err; // a real error reply: a bug to see
      if (this.failOpen) return { allowed: true, status: 200, headers: {} };
      return { allowed: false, status: 503, headers: { 'Retry-After': '1' } };
    }
    const [limited, limit, remaining, retryAfterMs, resetAfterMs] = reply;
    const resetS = Math.ceil(resetAfterMs / 1000);
    const retryS = limited && retryAfterMs >= 0 ? Math.max(1, Math.ceil(retryAfterMs / 1000)) : null;
    const headers = {
      'RateLimit-Policy': this.policy(limit),
      RateLimit: `"${this.name}";r=${remaining};t=${retryS ?? resetS}`,
      'X-RateLimit-Limit': String(limit),
      'X-RateLimit-Remaining': String(remaining),
      'X-RateLimit-Reset': String(resetS),
    };
    if (!limited) return { allowed: true, status: 200, headers };
    if (retryS !== null) {
      headers['Retry-After'] = String(retryS);
      this.remember(key, retryAfterMs);
    }
    return { allowed: false, status: 429, headers };
  }

  // Express-style middleware: (req, res, next); also usable with plain
  // http.createServer through `handle` below.
  middleware(keyOf = (req) => req.headers['x-user'] || req.socket.remoteAddress) {
    return (req, res, next) => {
      this.check(`rl:${this.name}:${keyOf(req)}`).then((result) => {
        for (const [name, value] of Object.entries(result.headers)) res.setHeader(name, value);
        if (result.allowed) return next();
        res.statusCode = result.status;
        res.end(result.status === 429 ? 'too many requests\n' : 'unavailable\n');
      }, next);
    };
  }
}

module.exports = { RateLimiter };
