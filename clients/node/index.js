'use strict';
// redis-ratelimit-client: the Node client of the redis-ratelimit module (see README.md).
const { RateLimit, RateLimitResult, windowSeconds } = require('./lib/ratelimit');
const { RateLimitUnavailableError } = require('./lib/client');
const { rateLimit } = require('./lib/express');
const { ipKeyGenerator } = require('./lib/ip-key');
const { RedisRateLimitStore } = require('./lib/erl-store');
const { RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes } = require('./lib/flexible');

module.exports = {
  RateLimit,
  RateLimitResult,
  RateLimitUnavailableError,
  rateLimit,
  RedisRateLimitStore,
  RateLimiterRedisModule,
  RateLimiterUnion,
  RateLimiterRes,
  windowSeconds,
  ipKeyGenerator,
};
