-- The fixed window counter as most users run it today: one counter per
-- window, KEYS[1]:<window number>, with INCRBY, and PEXPIRE when it is new.
-- (In a cluster, give KEYS[1] a {hash tag}: the window key derives from it.)
-- KEYS[1] = limiter key; ARGV = limit, window (seconds). Cost 1, ms server time.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local index = math.floor(now / window)
local key = KEYS[1] .. ':' .. index
local ends_in = (index + 1) * window - now
local count = tonumber(redis.call('GET', key) or '0')
if count + 1 > limit then
  return {1, limit, math.max(0, limit - count), ends_in, ends_in}
end
count = redis.call('INCRBY', key, 1)
if count == 1 then
  redis.call('PEXPIRE', key, ends_in)
end
return {0, limit, limit - count, -1, ends_in}
