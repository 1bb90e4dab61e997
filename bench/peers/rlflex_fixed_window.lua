-- rate-limiter-flexible (Node.js) fixed window: incrTtlLuaScript of lib/RateLimiterRedis.js
-- https://github.com/animir/node-rate-limiter-flexible at 3c9c826248cd470960740c89e25a1277dc98fbf4, ISC License, Copyright 2019 Roman Voloboev.
-- Copied below without the JavaScript string's line continuations, for bench/peers.py (RateLimiterRedis
-- consume runs it with KEYS = [key], ARGV = [points, duration seconds]).
redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
  redis.call('expire', KEYS[1], ARGV[2])
  ttl = 1000 * ARGV[2]
end
return {consumed, ttl}
