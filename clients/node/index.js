'use strict';
// redis-ratelimit: the Node client of the redis-ratelimit module (see README.md).
const { RateLimit, RateLimitResult, windowSeconds } = require('./lib/ratelimit');
const { RateLimitUnavailableError } = require('./lib/client');
const { rateLimit } = require('./lib/express');
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
};
