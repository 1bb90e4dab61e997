// ESM entry: the same objects as the CommonJS one.
import cjs from './index.js';

export const {
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
} = cjs;
export default cjs;
