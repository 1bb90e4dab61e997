#!lua name=floor
-- The floors of the Functions library's functions (bench/peers.py, "The
-- library's functions against their floors"): each function here makes the
-- same redis.call commands as a library function's common form, on the same
-- keys, and replies with as many integers, doing nothing else (its
-- arguments are ignored; one string.format for each time written). What a
-- library function spends above its floor is its own Lua: parsing, checks,
-- the decision, formatting, and the collector's share of its heap.
-- A string state read as the library reads it: at most 282 bytes, and
-- EXISTS when that is empty (no key, or an empty string).
local function read(key)
  if redis.call('GETRANGE', key, '0', '281') == '' then redis.call('EXISTS', key) end
end

local function ms(t, plus)
  return string.format('%d', t[1] * 1000 + plus)
end

-- TIME, a read, SET … PXAT: rl_fixedwindow, rl_slidingwindow, whose keys
-- live a minute or more: each call finds its key.
redis.register_function('floor_time_get_set', function(keys)
  local t = redis.call('TIME')
  read(keys[1])
  redis.call('SET', keys[1], t[1], 'PXAT', ms(t, 60000))
  return { 0, 1, 2, -1, 5 }
end)

-- The same for rl_gcra, rl_tokenbucket, rl_leakybucket, cl_throttle, whose
-- keys (a TAT 100 ms ahead a call) have expired when their next call comes
-- (a second or more later under callgrind): each call meets no key, reads
-- it twice (GETRANGE, EXISTS) and writes a key that expires as soon.
redis.register_function('floor_time_get_set_short', function(keys)
  local t = redis.call('TIME')
  read(keys[1])
  redis.call('SET', keys[1], t[1], 'PXAT', ms(t, 1))
  return { 0, 1, 2, -1, 5 }
end)

-- A read, SET … PXAT: rl_slidingwindow with NOW; rl_gcra with NOW (short).
redis.register_function('floor_get_set', function(keys, args)
  read(keys[1])
  redis.call('SET', keys[1], args[#args], 'PXAT', string.format('%d', args[#args] / 1000 + 60000))
  return { 0, 1, 2, -1, 5 }
end)
redis.register_function('floor_get_set_short', function(keys, args)
  read(keys[1])
  redis.call('SET', keys[1], args[#args], 'PXAT', string.format('%d', args[#args] / 1000 + 1))
  return { 0, 1, 2, -1, 5 }
end)

-- TIME, a read: the read-only twins.
redis.register_function { function_name = 'floor_time_get', flags = { 'no-writes' }, callback = function(keys)
  redis.call('TIME')
  read(keys[1])
  return { 0, 1, 2, -1, 5 }
end }

-- TIME, two reads, two SETs, six integers: rl_all of two limits, a GCRA
-- (short, as above) and a fixed window of a minute.
redis.register_function('floor_all2', function(keys)
  local t = redis.call('TIME')
  read(keys[1])
  read(keys[2])
  redis.call('SET', keys[1], t[1], 'PXAT', ms(t, 1))
  redis.call('SET', keys[2], t[1], 'PXAT', ms(t, 60000))
  return { 0, 1, 2, -1, 5, 1 }
end)

-- The sliding log's allowed call (with NOW: no TIME): ZCARD, its old
-- entries, its newest two, the block's score, ZADD NX, PEXPIREAT.
redis.register_function('floor_log', function(keys, args)
  local now = args[#args]
  local key = keys[1]
  redis.call('ZCARD', key)
  redis.call('ZRANGEBYSCORE', key, '-inf', string.format('%d', now - 60000000), 'LIMIT', '0', '129')
  redis.call('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', '0', '2')
  redis.call('ZSCORE', key, 'B')
  redis.call('ZADD', key, 'NX', now, string.sub(now, -3))
  redis.call('PEXPIREAT', key, string.format('%d', now / 1000 + 60000))
  return { 0, 1, 2, -1, 5 }
end)

-- rl_concurrency … ACQUIRE of a held lease (its fast path): TIME, the lease
-- set read whole (at most 2 × limit + 2 entries), ZADD of its slot,
-- PEXPIREAT.
redis.register_function('floor_concurrency', function(keys)
  local t = redis.call('TIME')
  local key = keys[1]
  redis.call('ZRANGE', key, '0', '202', 'WITHSCORES')
  redis.call('ZADD', key, string.format('%s%06d', t[1], t[2]), '1:g')
  redis.call('PEXPIREAT', key, ms(t, 60000))
  return { 0, 1, 2, -1, 5 }
end)

-- The read-only twins of rl_slidinglog, rl_all and rl_concurrency: their
-- reads.
redis.register_function { function_name = 'floor_log_ro', flags = { 'no-writes' }, callback = function(keys)
  local t = redis.call('TIME')
  local key = keys[1]
  redis.call('ZCARD', key)
  redis.call('ZRANGEBYSCORE', key, '-inf', t[1] .. '000000', 'LIMIT', '0', '129')
  redis.call('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', '0', '2')
  redis.call('ZSCORE', key, 'B')
  return { 0, 1, 2, -1, 5 }
end }

redis.register_function { function_name = 'floor_all2_ro', flags = { 'no-writes' }, callback = function(keys)
  redis.call('TIME')
  read(keys[1])
  read(keys[2])
  return { 0, 1, 2, -1, 5, 1 }
end }

redis.register_function { function_name = 'floor_concurrency_ro', flags = { 'no-writes' }, callback = function(keys)
  redis.call('TIME')
  redis.call('ZRANGE', keys[1], '0', '202', 'WITHSCORES')
  return { 0, 1, 2, -1, 5 }
end }
