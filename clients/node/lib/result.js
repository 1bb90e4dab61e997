'use strict';
// One decision as the clients see it (RateLimitResult: the module's five-element
// reply, its headers) and the block it reports. Shared by lib/ratelimit.js and
// lib/concurrency.js, above neither.

const secondsUp = (ms) => Math.max(1, Math.ceil(ms / 1000));

/**
 * One decision. `limited`: the request was refused (nothing was taken).
 * `limit`, `remaining`: tokens. `retryAfterMs`: -1 when allowed (for a leaky
 * bucket: the delay before doing the work), else the time until a request of
 * the same cost passes, or -1 if it never can (cost > limit). `resetAfterMs`:
 * the time until the limiter is full again. `which` (RL.ALL only): the 0-based
 * index of the binding limit in the list given (the module's 6th element - 1).
 */
class RateLimitResult {
  constructor(reply, { name = 'default', windowS, keys } = {}) {
    if (!Array.isArray(reply) || reply.length < 5) {
      throw new TypeError(`redis-ratelimit-client: unexpected reply ${JSON.stringify(reply)}`);
    }
    this.limited = Number(reply[0]) === 1;
    this.limit = Number(reply[1]);
    this.remaining = Number(reply[2]);
    this.retryAfterMs = Number(reply[3]);
    this.resetAfterMs = Number(reply[4]);
    if (reply.length >= 6) {
      this.which = Number(reply[5]) - 1;
      if (keys) Object.defineProperty(this, 'whichKey', { value: keys[this.which], enumerable: false });
    }
    Object.defineProperty(this, 'name', { value: name, enumerable: false, writable: true });
    Object.defineProperty(this, 'windowS', { value: windowS, enumerable: false, writable: true });
  }

  get allowed() {
    return !this.limited;
  }

  /**
   * The HTTP headers of this decision (draft-ietf-httpapi-ratelimit-headers-10):
   *   RateLimit-Policy: "<name>";q=<limit>;w=<window s>   (w omitted when unknown)
   *   RateLimit: "<name>";r=<remaining>;t=<s>   t: ceil(retryAfterMs/1000) on a refusal
   *              that can pass later, else ceil(resetAfterMs/1000)
   *   Retry-After: <s>   only when limited and retryAfterMs >= 0 (equal to t)
   * `{ legacy: true }` adds X-RateLimit-Limit / -Remaining / -Reset (seconds from now).
   */
  headers({ name = this.name, legacy = false } = {}) {
    const retryS = this.limited && this.retryAfterMs >= 0 ? secondsUp(this.retryAfterMs) : null;
    const resetS = Math.ceil(this.resetAfterMs / 1000);
    const h = {
      'RateLimit-Policy': `"${name}";q=${this.limit}${this.windowS !== undefined ? `;w=${this.windowS}` : ''}`,
      RateLimit: `"${name}";r=${this.remaining};t=${retryS ?? resetS}`,
    };
    if (retryS !== null) h['Retry-After'] = String(retryS);
    if (legacy) {
      h['X-RateLimit-Limit'] = String(this.limit);
      h['X-RateLimit-Remaining'] = String(this.remaining);
      h['X-RateLimit-Reset'] = String(resetS);
    }
    return h;
  }
}

/**
 * The refusal that sets a block reports the limiter's own retry time (the
 * block shows from the next call on): a caller told to come back then would
 * meet the block. So a refusal with `block` reports at least the block.
 */
function applyBlock(result, { block, peek } = {}) {
  if (!result.limited || peek || !(Number(block) > 0) || result.retryAfterMs < 0) return;
  const blockMs = Math.ceil(Number(block) * 1000);
  if (result.retryAfterMs < blockMs) result.retryAfterMs = blockMs;
  if (result.resetAfterMs < blockMs) result.resetAfterMs = blockMs;
}

module.exports = { RateLimitResult, applyBlock };
