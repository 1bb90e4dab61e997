-- The leaky bucket (as a meter and a queue) as most users run it today: a Lua
-- script over a hash that keeps the level and the last leak time (HMGET, HSET,
-- PEXPIRE). KEYS[1] = bucket key; ARGV = capacity, leak_tokens, leak_period
-- (seconds). Cost 1, float level, ms server time. Reply as RL.LEAKYBUCKET's:
-- when allowed, element 4 is the delay before doing the work.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2]) / (tonumber(ARGV[3]) * 1000) -- tokens per ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level = tonumber(state[1]) or 0
local last = tonumber(state[2]) or now
level = math.max(0, level - math.max(0, now - last) * rate)
if level + 1 > capacity then
  return {1, capacity, 0, math.ceil((level + 1 - capacity) / rate), math.ceil(level / rate)}
end
local delay = math.ceil(level / rate)
level = level + 1
local reset = math.ceil(level / rate)
redis.call('HSET', KEYS[1], 'level', level, 'ts', now)
redis.call('PEXPIRE', KEYS[1], reset)
return {0, capacity, math.floor(capacity - level), delay, reset}
