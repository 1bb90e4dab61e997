-- The floor of a limiter that decides on the server at the server's clock (ours, for
-- bench/peers.py): read the clock, read the state, write it with an expiry, reply five integers.
local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PXAT', t[1] * 1000 + 60000)
return {0, 1, 2, -1, 5}
