-- The sliding window counter as most users run it today: one counter per
-- window, KEYS[1]:<window number>; the previous window's count is weighted by
-- the share of it still inside the sliding window (MGET, INCRBY, PEXPIRE when
-- new). (In a cluster, give KEYS[1] a {hash tag}: the window keys derive from it.)
-- KEYS[1] = limiter key; ARGV = limit, window (seconds). Cost 1, ms server time.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local index = math.floor(now / window)
local elapsed = now - index * window
local cur_key = KEYS[1] .. ':' .. index
local counts = redis.call('MGET', KEYS[1] .. ':' .. (index - 1), cur_key)
local previous = tonumber(counts[1] or '0')
local current = tonumber(counts[2] or '0')
local estimate = previous * (window - elapsed) / window + current
if estimate + 1 > limit then
  local retry
  if current + 1 <= limit and previous > 0 then
    -- later in this window, once the previous window weighs little enough
    retry = window - elapsed - (limit - current - 1) * window / previous
  else
    -- in the next window, once this window's count weighs little enough
    retry = window - elapsed + math.max(0, window - (limit - 1) * window / current)
  end
  local reset = current > 0 and 2 * window - elapsed or window - elapsed
  return {1, limit, math.max(0, math.floor(limit - estimate)), math.ceil(retry), reset}
end
current = redis.call('INCRBY', cur_key, 1)
if current == 1 then
  -- kept through the next window, where it is the previous count
  redis.call('PEXPIRE', cur_key, 2 * window - elapsed)
end
return {0, limit, math.max(0, math.floor(limit - estimate - 1)), -1, 2 * window - elapsed}
