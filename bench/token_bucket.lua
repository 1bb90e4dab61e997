-- The token bucket as most users run it today: a Lua script over a hash that
-- keeps the tokens left and the last refill time (HMGET, HSET, PEXPIRE).
-- KEYS[1] = bucket key; ARGV = capacity, refill_tokens, refill_period (seconds).
-- Cost 1, float tokens, ms server time. Reply as RL.TOKENBUCKET's.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2]) / (tonumber(ARGV[3]) * 1000) -- tokens per ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local last = tonumber(state[2]) or now
local elapsed = math.max(0, now - last)
tokens = math.min(capacity, tokens + elapsed * rate)
if tokens < 1 then
  return {1, capacity, 0, math.ceil((1 - tokens) / rate), math.ceil((capacity - tokens) / rate)}
end
tokens = tokens - 1
local reset = math.ceil((capacity - tokens) / rate)
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], reset)
return {0, capacity, math.floor(tokens), -1, reset}
