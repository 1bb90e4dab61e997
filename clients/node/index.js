'use strict';
// redis-ratelimit-client: the Node client of the redis-ratelimit module (see README.md).
const { RateLimit, RateLimitResult, windowSeconds, parseLimit } = require('./lib/ratelimit');
const { RateLimitUnavailableError } = require('./lib/client');
const { rateLimit, concurrencyLimit } = require('./lib/express');
const { Lease } = require('./lib/concurrency');
const { ipKeyGenerator } = require('./lib/ip-key');
const { RedisRateLimitStore } = require('./lib/erl-store');
const { RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes } = require('./lib/flexible');

module.exports = {
  RateLimit,
  RateLimitResult,
  RateLimitUnavailableError,
  rateLimit,
  concurrencyLimit,
  Lease,
  RedisRateLimitStore,
  RateLimiterRedisModule,
  RateLimiterUnion,
  RateLimiterRes,
  windowSeconds,
  parseLimit,
  ipKeyGenerator,
};
