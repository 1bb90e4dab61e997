-- The sliding window log as most users run it today: a Lua script over a
-- sorted set (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE).
-- KEYS[1] = log key; ARGV = limit, window (seconds). Cost 1, µs server time.
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - window_us))
local count = redis.call('ZCARD', KEYS[1])
if count + 1 > limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, limit, 0, math.ceil((tonumber(oldest[2]) + window_us - now) / 1000), math.ceil(window_us / 1000)}
end
local stamp = string.format('%.0f', now)
redis.call('ZADD', KEYS[1], stamp, stamp .. ':' .. count)
redis.call('PEXPIRE', KEYS[1], math.ceil(window_us / 1000))
return {0, limit, limit - count - 1, -1, math.ceil(window_us / 1000)}
