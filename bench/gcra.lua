-- GCRA as most users run it today: a Lua script over GET / SET … PXAT.
-- KEYS[1] = limiter key; ARGV = max_burst, tokens_per_period, period (seconds).
-- Same decisions and reply as RL.GCRA (cost 1), µs server time.
local max_burst = tonumber(ARGV[1])
local per_period = tonumber(ARGV[2])
local period_us = tonumber(ARGV[3]) * 1000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = math.floor(period_us / per_period + 0.5)
local limit = max_burst + 1
local tolerance = interval * limit
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - tolerance > now then
  return {1, limit, math.floor((tolerance - (tat - now)) / interval),
          math.ceil((new_tat - tolerance - now) / 1000), math.ceil((tat - now) / 1000)}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PXAT', string.format('%.0f', math.ceil(new_tat / 1000)))
return {0, limit, math.floor((tolerance - (new_tat - now)) / interval), -1, math.ceil((new_tat - now) / 1000)}
