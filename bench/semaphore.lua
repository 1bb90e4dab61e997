-- A concurrency limit as users run it today without the module: a sorted
-- set of lease ids scored by their expiry, as django-smart-ratelimit's
-- concurrency limiter and Redisson-style expirable semaphores keep it
-- (ZREMRANGEBYSCORE of expired leases, ZSCORE of the caller's, ZCARD,
-- ZADD, PEXPIRE; ZREM to release).
-- KEYS[1] = the set; ARGV = acquire|release, limit, lease (seconds), id.
-- Reply: the five integers of RL.CONCURRENCY (reset_after: the lease).
local key, op, id = KEYS[1], ARGV[1], ARGV[4]
local limit = tonumber(ARGV[2])
local lease_us = tonumber(ARGV[3]) * 1000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
if op == 'release' then
  redis.call('ZREM', key, id)
  local count = redis.call('ZCARD', key)
  return {0, limit, limit - count, -1, 0}
end
local held = redis.call('ZSCORE', key, id)
local count = redis.call('ZCARD', key)
if not held and count >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {1, limit, 0, math.ceil((tonumber(oldest[2]) - now) / 1000), math.ceil(lease_us / 1000)}
end
redis.call('ZADD', key, string.format('%.0f', now + lease_us), id)
redis.call('PEXPIRE', key, math.ceil(lease_us / 1000))
if not held then count = count + 1 end
return {0, limit, limit - count, -1, math.ceil(lease_us / 1000)}
