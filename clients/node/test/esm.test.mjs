// The ESM entry exports the same objects as the CommonJS one.
import { test } from 'node:test';
import assert from 'node:assert';
import { createRequire } from 'node:module';
import pkg, { RateLimit, rateLimit, RedisRateLimitStore, RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes, RateLimitResult, RateLimitUnavailableError, ipKeyGenerator } from 'redis-ratelimit-client';

test('import and require give the same API', () => {
  const cjs = createRequire(import.meta.url)('redis-ratelimit-client');
  assert.strictEqual(pkg, cjs);
  for (const [name, value] of Object.entries({ RateLimit, rateLimit, RedisRateLimitStore, RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes, RateLimitResult, RateLimitUnavailableError, ipKeyGenerator })) {
    assert.strictEqual(typeof value, 'function', name);
    assert.strictEqual(value, cjs[name], name);
  }
});
