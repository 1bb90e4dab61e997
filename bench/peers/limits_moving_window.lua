-- limits (Python) moving window: limits/resources/redis/lua_scripts/acquire_moving_window.lua
-- https://github.com/alisaifee/limits at f7d1eef524a55301956a21a07853423632605b80, MIT License, Copyright (c) 2023 Ali-Akber Saifee.
-- Copied unchanged below for bench/peers.py (limits' RedisStorage.acquire_entry runs it with
-- KEYS = [key], ARGV = [time.time(), limit, expiry seconds, amount]).
local timestamp = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local expiry = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])

if amount > limit then
    return false
end

local entry = redis.call('lindex', KEYS[1], limit - amount)

if entry and tonumber(entry) >= timestamp - expiry then
    return false
end
local entries = {}
for i = 1, amount do
    entries[i] = timestamp
end

for i=1,#entries,5000 do
    redis.call('lpush', KEYS[1], unpack(entries, i, math.min(i+4999, #entries)))
end
redis.call('ltrim', KEYS[1], 0, limit - 1)
redis.call('expire', KEYS[1], expiry)

return true
