#!lua name=ratelimit
-- The Functions engine of redis-ratelimit (issue 30): the module's commands as
-- a Redis Functions library, with the module's grammar, bounds, error texts,
-- replies, stored bytes and expiries. Contract: docs/functions.md. Reference:
-- the Rust in core/src/ (algorithms) and src/command/ (handlers, storage).
--
-- Numbers: Redis's Lua 5.1 has only doubles, exact for integers up to 2^53.
-- Every value is checked to stay within that (instants in µs, counts,
-- durations); products that may exceed it go through `muldiv`, which is
-- exact; CL.THROTTLE's nanosecond instants are kept as (µs, ns) pairs. A
-- value the module accepts but that Lua cannot hold exactly gets an error
-- (docs/functions.md, "Differences").
--
-- The EVAL form is this file without its first line: it then dispatches on
-- ARGV[1], the function name.

-- The library's version (rl_version): grows with every change.
local VERSION = 25

-- Everything is built inside `build`, on the first call: while a library
-- loads, Redis 7.0 exposes only `redis` (not `string`, `math`, `pcall`).
-- Inside it, each command (define) and each algorithm (need_*) is built by
-- the first call that needs it: the library builds each once; the EVAL form
-- builds on every call (`eval_form`), and only what the called function uses.
local function build(eval_form)

local byte, sub, find, match, upper, format = string.byte, string.sub, string.find, string.match, string.upper, string.format
local floor, fmod = math.floor, math.fmod
local rcall, rpcall = redis.call, redis.pcall
local tonumber, tostring, type, error, pcall, unpack = tonumber, tostring, type, error, pcall, unpack

local TWO52 = 4503599627370496
local TWO53 = 9007199254740992
local MAX_EXACT = TWO53 - 1
-- An instant (ms) after any server's clock: expire_time_ms's probe.
local FAR_MS = TWO52
local MAX_PERIOD_US = 31622400000000
local US_PER_SEC = 1000000
-- The module's settings, at their defaults (src/command/settings.rs).
local SLIDING_LOG_MAX_LIMIT = 1000
local SLIDING_LOG_CALL_BUDGET = 4000
local SLIDING_LOG_HARD_MAX = 100000
local STALE_REMOVED_PER_CALL = 128
local CONCURRENCY_MAX_LIMIT = 1000
local CONCURRENCY_HARD_MAX = 100000
local CONCURRENCY_MAX_ID_LENGTH = 128
local CONCURRENCY_HARD_MAX_ID = 1024
local EXPIRED_REMOVED_PER_CALL = 128

---------------------------------------------------------------------------
-- Errors (core/src/error.rs), raised as {err = text} and replied once.

local function fail(text)
  error({ err = text }, 0)
end

local E_WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local E_SYNTAX = 'ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters'
local E_OVERFLOW = 'ERR parameters too large: the limiter\'s arithmetic would overflow'
local E_REFILL = 'ERR the time to refill from empty (limit × period / tokens per period) must be <= 31622400 seconds (366 days)'
local E_DUPLICATE = 'ERR RL.ALL names the same key twice'
local E_LIMITCOUNT = 'ERR RL.ALL needs exactly numkeys limits, one per key'
local E_UNKNOWN = 'ERR unknown limit type: expected GCRA, TOKENBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG, CONCURRENCY or POLICY name'
local E_LEAKY_IN_ALL = 'ERR LEAKYBUCKET cannot be part of RL.ALL: its \'allowed after a delay\' has no all-or-nothing meaning'
local E_POLICY = 'ERR policies are module data: POLICY is not available in the Functions library (use the module, or give the limit itself)'
local E_LEASE_OP = 'ERR expected ACQUIRE id, RENEW id or RELEASE id after the parameters'
local E_LEASE_SYNTAX = 'ERR syntax error: expected [TOKENS n] [PEEK] [BLOCK duration] after ACQUIRE id, [PEEK] after RENEW id or RELEASE id'
local E_ALL_LEASE = 'ERR a CONCURRENCY limit of RL.ALL takes ACQUIRE id after its parameters (RENEW and RELEASE: RL.CONCURRENCY)'
local E_REFUND_CONCURRENCY = 'ERR REFUND does not apply to a CONCURRENCY limit: give its slots back with RL.CONCURRENCY key limit lease RELEASE id'
-- The library's own: a value the module accepts that Lua cannot compute
-- exactly.
-- FORCE's errors (core/src/error.rs ForceSyntax, ForcePlace, ForceTooMuch).
local E_FORCE = {
  syntax = 'ERR syntax error: FORCE records TOKENS n whatever the limit says; it does not go with PEEK or REFUND',
  concurrency = 'ERR FORCE does not apply to RL.CONCURRENCY: a slot is held and released, not a cost',
  in_all = 'ERR FORCE belongs to a limit of RL.ALL: write it right after that limit\'s parameters',
  horizon = 'ERR FORCE cannot record this cost: the debt would take more than 366 days to repay; nothing was recorded',
  log = 'ERR FORCE cannot record this cost: the log would hold more than twice its limit in its window; nothing was recorded',
  sub = 'ERR FORCE cannot record this cost: a sub-window would count more than 4294967295 tokens; nothing was recorded',
}
local E_INEXACT_STATE = 'ERR the value at this key holds a number above 9007199254740991 (2^53 - 1), which the Functions library cannot compute exactly'
local INF = 1 / 0

-- A value the module did not write, named with its key (core/src/error.rs
-- ForeignState: the key's first 64 bytes, anything but printable ASCII as
-- '?', '...' when cut).
local NOT_OURS_AHEAD = 'a time more than 366 days after the server clock'
local NOT_OURS_TOO_LONG = 'more than 200001 entries'
local NOT_OURS_MEMBER = 'a member the module did not write'
local function e_foreign(key, command, why)
  local shown = string.gsub(string.sub(key, 1, 64), '[^\33-\126]', '?')
  if #key > 64 then shown = shown .. '...' end
  fail('ERR the value at key \'' .. shown .. '\' is not ' .. command .. ' state (' .. why .. ')')
end

local function e_not_integer(name) fail('ERR ' .. name .. ' is not an integer or out of range') end
local function e_not_float(name) fail('ERR ' .. name .. ' is not a valid float') end
local function e_range(name, bound) fail('ERR ' .. name .. ' must be ' .. bound) end
local function e_period(name)
  fail('ERR ' .. name .. ' must be a finite number of seconds, at least 0.000001 and at most 31622400 (366 days)')
end
local function e_rate(name)
  fail('ERR rate too high: at most one token per microsecond (' .. name .. ' too large for its period)')
end
local function e_invalid(command)
  fail('ERR the value at this key is not ' .. command .. ' state (it was written by something else)')
end
local function e_inexact(name)
  fail('ERR ' .. name .. ' must be <= 9007199254740991 (2^53 - 1) in the Functions library, the largest integer it computes exactly')
end

-- The rest is built inside a function of its own: a closure made there gets
-- the names above from that function's upvalues (a copy each), where a name
-- of the same function costs a walk over every local captured so far (Lua
-- 5.1's open upvalues). The EVAL form builds on every call: this makes its
-- call ~15% cheaper.
return (function()

---------------------------------------------------------------------------
-- Numbers

-- The decimal string of an integer-valued double (tostring would print
-- 1.7e+15).
local function dec(x)
  return format('%d', x)
end

-- Signed 64-bit integer bounds as decimal strings (Redis's string2ll).
local I64_MAX = '9223372036854775807'
local I64_MIN_ABS = '9223372036854775808'

-- A string Redis's string2ll accepts ("-"? then "0" or [1-9][0-9]*, within
-- i64): its value (a double; exact when |v| <= 2^53), else nil.
local function to_int(s)
  if s == '0' then return 0 end
  local digits = s
  local negative = byte(s, 1) == 45
  if negative then digits = sub(s, 2) end
  if not find(digits, '^[1-9]%d*$') then return nil end
  local n = #digits
  if n > 19 then return nil end
  if n == 19 and digits > (negative and I64_MIN_ABS or I64_MAX) then return nil end
  local v = tonumber(digits)
  if negative then v = -v end
  return v
end

-- A non-negative decimal of ASCII digits within i64, as the module writes
-- its integers (core/src/algorithm/mod.rs parse_decimal; leading zeros
-- allowed). Returns the value, or nil (not one), or false (one above 2^53 - 1).
local function parse_decimal(s)
  local n = #s
  if n == 0 or n > 19 or find(s, '%D') then return nil end
  if n == 16 then
    if s > '9007199254740991' then return false end
  elseif n > 16 then
    local t = s
    local z = find(t, '[^0]')
    t = z and sub(t, z) or '0'
    if #t == 19 and t > I64_MAX then return nil end
    if #t > 16 or (#t == 16 and t > '9007199254740991') then return false end
  end
  return tonumber(s)
end

-- ⌈a / b⌉ truncating like Rust's `a / b + (a % b != 0)` (b > 0).
local function ceil_div(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 then q = q + 1 end
  return q
end

-- ⌊a / b⌋ for a >= 0, b > 0 (exact below 2^53).
local function floor_div(a, b)
  local r = fmod(a, b)
  return (a - r) / b, r
end

-- Exact ⌊(a·b + c) / d⌋ and the remainder, for integers 0 <= a, b, c < 2^53
-- and 1 <= d <= 2^53. The quotient is nil when it is 2^53 or more.
local L24 = 16777216
local function muldiv(a, b, c, d)
  local p = a * b
  if p < TWO53 then
    local s = p + c
    if s < TWO53 then
      local r = fmod(s, d)
      return (s - r) / d, r
    end
  end
  -- Limbs of 24 bits: a·b + c < 2^107 in five limbs, then bit-serial
  -- division (every intermediate below 2^53).
  local a0 = fmod(a, L24); local t = (a - a0) / L24
  local a1 = fmod(t, L24); local a2 = (t - a1) / L24
  local b0 = fmod(b, L24); t = (b - b0) / L24
  local b1 = fmod(t, L24); local b2 = (t - b1) / L24
  local c0 = fmod(c, L24); t = (c - c0) / L24
  local c1 = fmod(t, L24); local c2 = (t - c1) / L24
  local z = { a0 * b0 + c0, a0 * b1 + a1 * b0 + c1, a0 * b2 + a1 * b1 + a2 * b0 + c2, a1 * b2 + a2 * b1, a2 * b2, 0 }
  for i = 1, 5 do
    local lo = fmod(z[i], L24)
    z[i + 1] = z[i + 1] + (z[i] - lo) / L24
    z[i] = lo
  end
  local q, r, big = 0, 0, false
  for i = 6, 1, -1 do
    local limb = z[i]
    local bit = 8388608 -- 2^23
    while bit >= 1 do
      local b = 0
      if limb >= bit then limb = limb - bit; b = 1 end
      local u = r - d + r + b
      if u >= 0 then r = u; q = q + q + 1 else r = r + r + b; q = q + q end
      if q >= TWO53 then big = true; q = 0 end
      bit = bit / 2
    end
  end
  if big then return nil, r end
  return q, r
end

-- Whether a string is the keyword `name` (upper case), ignoring ASCII case.
local function is_kw(word, name)
  return #word == #name and upper(word) == name
end

local function is_space(c)
  return c == 32 or (c >= 9 and c <= 13)
end

-- Redis's float parsing (strtod of the whole string; no leading or trailing
-- space, no NUL, no NaN, no overflow or underflow to zero).
local function to_float(s)
  local n = #s
  if n == 0 or is_space(byte(s, 1)) or is_space(byte(s, n)) or find(s, '%z') then return nil end
  -- Hex floats are refused on every server, as the module refuses them
  -- (Valkey 9.1's parser does, Redis 7.0's does not).
  if find(s, '[xX]') then return nil end
  local v = tonumber(s)
  if v == nil or v ~= v then return nil end
  local body = s
  local c = byte(body, 1)
  if c == 43 or c == 45 then body = sub(body, 2) end
  if v == 1 / 0 or v == -1 / 0 then
    -- strtod's "inf"/"infinity" are accepted; an overflow (ERANGE) is not.
    local w = upper(body)
    if w ~= 'INF' and w ~= 'INFINITY' then return nil end
  elseif v == 0 then
    -- An underflow to zero (ERANGE) is refused: a non-zero mantissa.
    local mantissa
    if find(body, '^0[xX]') then
      mantissa = sub(body, 3):match('^[^pP]*')
      if find(mantissa, '[1-9a-fA-F]') then return nil end
    else
      mantissa = body:match('^[^eE]*')
      if find(mantissa, '[1-9]') then return nil end
    end
  end
  return v
end

-- Seconds to whole µs, rounded to the nearest (half away from zero); nil
-- unless finite, > 0, <= 366 days and >= 1 µs (core/src/time.rs).
local function seconds_to_us(secs)
  if secs ~= secs or secs <= 0 or secs > 31622400 then return nil end
  local x = secs * 1e6
  local f = floor(x)
  if x - f >= 0.5 then f = f + 1 end
  if f < 1 then return nil end
  return f
end

---------------------------------------------------------------------------
-- Arguments: `a[1]` is the key (or numkeys for rl_all), `a[i]` the module's
-- argv[i].

local function arg_or_syntax(a, i, syntax)
  local w = a[i]
  if w == nil then fail(syntax or E_SYNTAX) end
  return w
end

-- An integer parameter (exactness is checked by each algorithm).
local function integer(a, i, name, syntax)
  local v = to_int(arg_or_syntax(a, i, syntax))
  if v == nil then e_not_integer(name) end
  return v
end

local function integer_at_least(a, i, name, min, bound, syntax)
  local v = integer(a, i, name, syntax)
  if v < min then e_range(name, bound) end
  return v
end

local function seconds_as_us(a, i, name, syntax)
  local secs = to_float(arg_or_syntax(a, i, syntax))
  if secs == nil then e_not_float(name) end
  local us = seconds_to_us(secs)
  if us == nil then e_period(name) end
  return us
end

-- NOW <unix_µs>: the caller's clock.
local function now_option(a, i, syntax)
  local v = to_int(arg_or_syntax(a, i, syntax))
  if v == nil then e_not_integer('NOW') end
  if v < 0 or v > TWO52 then e_range('NOW', '>= 0 and <= 4503599627370496 (unix µs)') end
  return v
end

-- A call's options: one table, reset by every call (no call runs inside
-- another), which spares a table per call. `own` holds a command's own
-- option (ALIGN's word, BUCKETS' k, WITHLIMITS), false when not given.
-- `ro`: the call is a read-only twin's (FCALL_RO), set by `call` (a twin
-- answers as if PEEK were given, whether or not the word is there).
local O = { refund = false, n = 1, peek = false, block_us = false, now = false, now_ms = false, own = false, force = false, ro = false }

local function default_options(now)
  local o = O
  o.refund, o.n, o.peek, o.block_us, o.now, o.now_ms, o.own = false, 1, false, false, now or false, false, false
  o.force = false
  return o
end

-- The options after the parameters, from `from`: [TOKENS n | REFUND n]
-- [FORCE] [PEEK] [BLOCK duration] [NOW unix_µs]; `own(word, i, a, o)` answers how
-- many words a command's own option takes (nil: a syntax error).
-- Returns {refund, n, peek, block_us, now, own}.
local function options(a, from, own, syntax, now)
  local o = default_options(now)
  local op_seen, block_seen, now_seen = false, false, now ~= nil
  local i = from
  local count = #a
  while i <= count do
    local w = a[i]
    local W = upper(w)
    if W == 'TOKENS' or W == 'REFUND' then
      if op_seen then fail(syntax or E_SYNTAX) end
      op_seen = true
      o.refund = W == 'REFUND'
      o.n = integer_at_least(a, i + 1, W, 1, '>= 1', syntax)
      i = i + 2
    elseif W == 'PEEK' and not o.peek then
      o.peek = true
      i = i + 1
    elseif W == 'FORCE' and not o.force then
      o.force = true
      i = i + 1
    elseif W == 'BLOCK' and not block_seen then
      block_seen = true
      o.block_us = seconds_as_us(a, i + 1, 'BLOCK', syntax)
      i = i + 2
    elseif W == 'NOW' and not now_seen then
      now_seen = true
      o.now = now_option(a, i + 1, syntax)
      i = i + 2
    else
      local taken = own and own(W, i, a, o)
      if not taken or taken < 1 then fail(syntax or E_SYNTAX) end
      i = i + taken
    end
  end
  if o.force and (o.peek or o.refund or o.ro) then fail(E_FORCE.syntax) end
  return o
end

---------------------------------------------------------------------------
-- Decisions: {limited, limit, remaining, retry_after_us (false: none),
-- reset_after_us} (core/src/algorithm/mod.rs Decision), built in place.

-- A refund's answer: the limiter as a zero-cost take reads it.
local function refunded(alg, lim, state, now)
  local d = alg.take(lim, state, now, 0)
  d[1] = false
  d[4] = false
  return d
end

local DELETE = 'del'

-- FORCE (core/src/algorithm/mod.rs forced): the ordinary take when the cost
-- fits; else the cost recorded past the limit (alg.charge: the value, its
-- expiry and the new state), answered limited, nothing remaining, the
-- retry of one more token against the new state, and its reset.
local function forced(alg, lim, state, now, cost)
  local d, value, expire = alg.take(lim, state, now, cost)
  if not d[1] then return d, value, expire end
  local new_state
  value, expire, new_state = alg.charge(lim, state, now, cost)
  local after = alg.take(lim, new_state, now, 1)
  return { true, after[2], 0, after[4], after[5] }, value, expire
end

---------------------------------------------------------------------------
-- The algorithms: each built by its need_* (which returns it) on the first
-- call that needs it, so that the EVAL form, which builds on every call,
-- builds only what the called function uses.

local GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, BUCKETWINDOW, CELL, SLIDINGLOG, CONCURRENCY
local bucket_window_new, cell_new, reply_secs5, log_entries, log_forced_entries, e_over_budget, score_us, apply_log_block, stale_want
local e_zset_member, zset_open, zset_count_after, z_old_members, small_dec, memo_check, ZADD_ARGS, SMALL_DEC
local z_top, z_desc_extend

local function check_limit_and_window(limit, window_us)
  if limit < 1 then e_range('limit', '>= 1') end
  if window_us < 1 or window_us > MAX_PERIOD_US then e_period('window') end
end

---------------------------------------------------------------------------
-- GCRA (core/src/algorithm/gcra.rs). State: the TAT in µs, decimal.

local function need_gcra()
if GCRA then return GCRA end
GCRA = { command = 'RL.GCRA' }

local function gcra_new(max_burst, tpp, period_us, raw_burst, names)
  if max_burst < 0 then e_range(names[1], '>= 0') end
  if tpp < 1 then e_range(names[2], '>= 1') end
  if period_us < 1 or period_us > MAX_PERIOD_US then e_period('period') end
  if tpp > period_us then e_rate(names[2]) end
  local q, rest = floor_div(period_us, tpp)
  local t = q
  if rest >= tpp - rest then t = q + 1 end
  if raw_burst == I64_MAX then fail(E_OVERFLOW) end
  local limit = max_burst + 1
  local tau = t * limit
  if tau > MAX_PERIOD_US then fail(E_REFILL) end
  return { t = t, limit = limit, tau = tau }
end

function GCRA.parse(a, at)
  local max_burst = integer(a, at, 'max_burst')
  local tpp = integer(a, at + 1, 'tokens_per_period')
  local period_us = seconds_as_us(a, at + 2, 'period')
  return gcra_new(max_burst, tpp, period_us, a[at], { 'max_burst', 'tokens_per_period' })
end

-- A time above 2^53 µs lies far beyond the horizon: INF.
function GCRA.decode(lim, inner)
  local tat = parse_decimal(inner)
  if tat == false then return INF end
  return tat
end

function GCRA.latest(tat)
  return tat
end

local function gcra_remaining(lim, ttl)
  local x = lim.tau - ttl
  if x <= 0 then return 0 end
  local t = lim.t
  return (x - fmod(x, t)) / t
end

function GCRA.take(lim, tat, now, cost)
  if tat == nil or tat < now then tat = now end
  local ttl = tat - now
  if cost > lim.limit then
    return { true, lim.limit, gcra_remaining(lim, ttl), false, ttl }
  end
  local inc = lim.t * cost
  local new_tat = tat + inc
  local new_ttl = new_tat - now
  if new_ttl > lim.tau then
    return { true, lim.limit, gcra_remaining(lim, ttl), new_ttl - lim.tau, ttl }
  end
  local value
  if inc > 0 then value = dec(new_tat) end
  return { false, lim.limit, gcra_remaining(lim, new_ttl), false, new_ttl }, value, new_tat
end

function GCRA.charge(lim, tat, now, cost)
  if tat == nil or tat < now then tat = now end
  local new_tat = tat + lim.t * cost
  if new_tat - now > MAX_PERIOD_US then fail(E_FORCE.horizon) end
  return dec(new_tat), new_tat, new_tat
end

function GCRA.refund(lim, tat, now, tokens)
  if tat == nil then return refunded(GCRA, lim, nil, now), nil end
  local new_tat = tat - lim.t * tokens
  if new_tat < now then new_tat = now end
  if new_tat <= now then return refunded(GCRA, lim, nil, now), DELETE end
  return refunded(GCRA, lim, new_tat, now), dec(new_tat), new_tat
end
return GCRA
end

---------------------------------------------------------------------------
-- Token bucket (core/src/algorithm/token_bucket.rs). State: when the bucket
-- is full again, `full_at_us[:remainder]`, remainder in 1/refill_tokens µs.
-- Deficits ("units" of 1/r µs) are kept as pairs (whole µs, remainder < r).

local function need_buckets()
if TOKENBUCKET then return TOKENBUCKET end
TOKENBUCKET = { command = 'RL.TOKENBUCKET' }

local function bucket_new(capacity, r, p, names)
  if capacity < 1 then e_range('capacity', '>= 1') end
  if r < 1 then e_range(names[1], '>= 1') end
  if p < 1 or p > MAX_PERIOD_US then e_period(names[2]) end
  if r > p then e_rate(names[1]) end
  -- ⌈capacity × p / r⌉ <= 366 days.
  local cq, cr = muldiv(capacity, p, 0, r)
  if cq == nil or cq + (cr > 0 and 1 or 0) > MAX_PERIOD_US then fail(E_REFILL) end
  if capacity > MAX_EXACT then e_inexact('capacity') end
  return { capacity = capacity, r = r, p = p, cq = cq, cr = cr }
end

function TOKENBUCKET.parse(a, at)
  local capacity = integer(a, at, 'capacity')
  local r = integer(a, at + 1, 'refill_tokens')
  local p = seconds_as_us(a, at + 2, 'refill_period')
  return bucket_new(capacity, r, p, { 'refill_tokens', 'refill_period' })
end

function TOKENBUCKET.decode(lim, inner)
  local colon = find(inner, ':', 1, true)
  if colon == nil then
    local us = parse_decimal(inner)
    if us == nil then return nil end
    return { us or INF, 0 }
  end
  local us, rem = parse_decimal(sub(inner, 1, colon - 1)), parse_decimal(sub(inner, colon + 1))
  if us == nil or rem == nil then return nil end
  -- A remainder is clamped below refill_tokens: a huge one reads as INF.
  return { us or INF, rem or INF }
end

function TOKENBUCKET.latest(f)
  return f[1]
end

-- The deficit at `now` (units), as (µs, remainder).
local function bucket_debt(lim, f, now)
  if f == nil then return 0, 0 end
  local rem = f[2]
  if rem > lim.r - 1 then rem = lim.r - 1 end
  local dq = f[1] - now
  if dq < 0 then return 0, 0 end
  return dq, rem
end

-- ⌊(capacity units − debt) / p⌋, at least 0.
local function bucket_remaining(lim, dq, dr)
  local xq, xr = lim.cq - dq, lim.cr - dr
  if xr < 0 then xr = xr + lim.r; xq = xq - 1 end
  if xq < 0 then return 0 end
  return (muldiv(xq, lim.r, xr, lim.p))
end

local function bucket_decision(lim, limited, dq, dr, retry)
  return { limited, lim.capacity, bucket_remaining(lim, dq, dr), retry, dq + (dr > 0 and 1 or 0) }
end

-- `n × p` units as (µs, remainder); nil when past 2^53 µs.
local function bucket_units(lim, n)
  return muldiv(n, lim.p, 0, lim.r)
end

local function bucket_state(lim, now, dq, dr)
  local full_at = now + dq
  local value = dr == 0 and dec(full_at) or format('%d:%d', full_at, dr)
  return value, full_at + (dr > 0 and 1 or 0)
end

function TOKENBUCKET.take(lim, f, now, cost)
  local dq, dr = bucket_debt(lim, f, now)
  if cost > lim.capacity then
    return bucket_decision(lim, true, dq, dr, false)
  end
  local nq, nr = bucket_units(lim, cost)
  nq, nr = dq + nq, dr + nr
  if nr >= lim.r then nr = nr - lim.r; nq = nq + 1 end
  -- excess = new debt − capacity units
  local eq, er = nq - lim.cq, nr - lim.cr
  if er < 0 then er = er + lim.r; eq = eq - 1 end
  if eq >= 0 and (eq > 0 or er > 0) then
    return bucket_decision(lim, true, dq, dr, eq + (er > 0 and 1 or 0))
  end
  local value, expire
  if cost > 0 then value, expire = bucket_state(lim, now, nq, nr) end
  return bucket_decision(lim, false, nq, nr, false), value, expire
end

-- The deficit grows past the capacity (the balance below zero).
function TOKENBUCKET.charge(lim, f, now, cost)
  local dq, dr = bucket_debt(lim, f, now)
  local nq, nr = bucket_units(lim, cost)
  if nq == nil then fail(E_FORCE.horizon) end
  nq, nr = dq + nq, dr + nr
  if nr >= lim.r then nr = nr - lim.r; nq = nq + 1 end
  if nq + (nr > 0 and 1 or 0) > MAX_PERIOD_US then fail(E_FORCE.horizon) end
  local value, expire = bucket_state(lim, now, nq, nr)
  return value, expire, { now + nq, nr }
end

function TOKENBUCKET.refund(lim, f, now, tokens)
  local alg = lim.alg
  if f == nil then return refunded(alg, lim, nil, now), nil end
  local dq, dr = bucket_debt(lim, f, now)
  local bq, br = bucket_units(lim, tokens)
  local nq, nr
  if bq == nil then
    nq, nr = 0, 0
  else
    nq, nr = dq - bq, dr - br
    if nr < 0 then nr = nr + lim.r; nq = nq - 1 end
    if nq < 0 then nq, nr = 0, 0 end
  end
  if nq == 0 and nr == 0 then return refunded(alg, lim, nil, now), DELETE end
  local value, expire = bucket_state(lim, now, nq, nr)
  return refunded(alg, lim, { now + nq, nr }, now), value, expire
end

---------------------------------------------------------------------------
-- Leaky bucket (core/src/algorithm/leaky_bucket.rs): the token bucket's
-- arithmetic and state; an accepted request's retry_after is its wait.

LEAKYBUCKET = { command = 'RL.LEAKYBUCKET', decode = TOKENBUCKET.decode, latest = TOKENBUCKET.latest }

function LEAKYBUCKET.parse(a, at)
  local capacity = integer(a, at, 'capacity')
  local r = integer(a, at + 1, 'leak_tokens')
  local p = seconds_as_us(a, at + 2, 'leak_period')
  return bucket_new(capacity, r, p, { 'leak_tokens', 'leak_period' })
end

function LEAKYBUCKET.take(lim, f, now, cost)
  local d, value, expire = TOKENBUCKET.take(lim, f, now, cost)
  if not d[1] then
    local dq, dr = bucket_debt(lim, f, now)
    d[4] = dq + (dr > 0 and 1 or 0)
  end
  return d, value, expire
end

LEAKYBUCKET.refund = TOKENBUCKET.refund
LEAKYBUCKET.charge = TOKENBUCKET.charge
return TOKENBUCKET
end

---------------------------------------------------------------------------
-- Fixed window (core/src/algorithm/fixed_window.rs). State:
-- `[F]<window_start_us>:<count>`.

local function need_fixed()
if FIXEDWINDOW then return FIXEDWINDOW end
FIXEDWINDOW = { command = 'RL.FIXEDWINDOW' }

-- Calendar windows (core/src/calendar.rs): DAY, WEEK (ISO, from Monday),
-- MONTH, YEAR, between local boundaries at a fixed offset from UTC (UTC,
-- +hh:mm, -hh:mm). IANA zones need the module: their rules are not here.
-- A unit's number, and its longest window (the `w` the module keeps).
local CAL_UNITS = { DAY = 1, WEEK = 2, MONTH = 3, YEAR = 4 }
local US_PER_HOUR = 3600 * US_PER_SEC
local US_PER_DAY = 24 * US_PER_HOUR
local CAL_LONGEST = { US_PER_DAY + US_PER_HOUR, 7 * US_PER_DAY + US_PER_HOUR, 31 * US_PER_DAY + US_PER_HOUR, 366 * US_PER_DAY }

-- Days since 1970-01-01 of a proleptic Gregorian date, and back (H.
-- Hinnant's civil calendar algorithms; every value a small integer).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

-- The calendar window of `lim` holding the instant t (µs, 0 <= t < 2^53):
-- its start and end (the next window's start), µs.
local function calendar_window(lim, t)
  local offset = lim.offset
  -- The local day number (|offset| < a day: the dividend is >= 0).
  local day = floor_div(t + offset + US_PER_DAY, US_PER_DAY) - 1
  local unit, first, after = lim.unit
  if unit == 1 then
    first, after = day, day + 1
  elseif unit == 2 then
    -- 1970-01-01 was a Thursday: (day + 3) % 7 days since Monday.
    first = day - (day + 3) % 7
    after = first + 7
  else
    local y, m = civil_from_days(day)
    if unit == 4 then m = 1 end
    first = days_from_civil(y, m, 1)
    if unit == 4 or m == 12 then
      after = days_from_civil(y + 1, 1, 1)
    else
      after = days_from_civil(y, m + 1, 1)
    end
  end
  return first * US_PER_DAY - offset, after * US_PER_DAY - offset
end

function FIXEDWINDOW.parse(a, at)
  local limit = integer(a, at, 'limit')
  local word = a[at + 1]
  local unit = word and CAL_UNITS[upper(word)]
  if unit then
    check_limit_and_window(limit, CAL_LONGEST[unit])
    if limit > MAX_EXACT then e_inexact('limit') end
    return { limit = limit, w = CAL_LONGEST[unit], first = false, unit = unit, offset = 0, zones = {} }
  end
  local window_us = seconds_as_us(a, at + 1, 'window')
  check_limit_and_window(limit, window_us)
  if limit > MAX_EXACT then e_inexact('limit') end
  return { limit = limit, w = window_us, first = false }
end

-- The word after a zone's TZ as µs east of UTC: UTC, +hh:mm, -hh:mm (hours
-- 00 to 23). A word shaped as an IANA name needs the module; one that
-- cannot be one (an offset misspelled) is the module's unknown zone.
local function zone_offset_us(word)
  if is_kw(word, 'UTC') then return 0 end
  local _, _, sign, hh, mm = find(word, '^([+-])(%d%d):(%d%d)$')
  if sign and tonumber(hh) <= 23 and tonumber(mm) <= 59 then
    local us = (tonumber(hh) * 60 + tonumber(mm)) * 60 * US_PER_SEC
    return sign == '-' and -us or us
  end
  local shown = string.gsub(string.sub(word, 1, 64), '[^\33-\126]', '?')
  if #word > 64 then shown = shown .. '...' end
  -- A tz database name: a letter, then letters, digits, / _ + -.
  if not find(word, '^%a[%w/_+%-]*$') then
    fail('ERR unknown time zone \'' .. shown .. '\': expected an IANA zone name (Europe/Paris), UTC, or an offset +hh:mm / -hh:mm')
  end
  fail('ERR time zone \'' .. shown .. '\' needs the module: the Functions library takes UTC and offsets +hh:mm / -hh:mm')
end

-- A calendar limit's `TZ zone` at a[i] (core/src/limit/zone.rs): the limit
-- in that zone (kept beside the limit) and the words taken (0 or 2).
function FIXEDWINDOW.zoned(lim, a, i, syntax)
  if not lim.unit or a[i] == nil or not is_kw(a[i], 'TZ') then return lim, 0 end
  local word = a[i + 1]
  if word == nil then fail(syntax or E_SYNTAX) end
  local zoned = lim.zones[word]
  if not zoned then
    zoned = { limit = lim.limit, w = lim.w, first = false, unit = lim.unit, offset = zone_offset_us(word), alg = FIXEDWINDOW }
    lim.zones[word] = zoned
  end
  return zoned, 2
end

function FIXEDWINDOW.decode(lim, inner)
  local first = byte(inner, 1) == 70 -- F
  if first then inner = sub(inner, 2) end
  -- A count in debt (FORCE's) ends with :D.
  local debt = byte(inner, -1) == 68 -- D
  if debt then
    if byte(inner, -2) ~= 58 then return nil end -- :
    inner = sub(inner, 1, -3)
  end
  local colon = find(inner, ':', 1, true)
  if colon == nil then return nil end
  local start, count = parse_decimal(sub(inner, 1, colon - 1)), parse_decimal(sub(inner, colon + 1))
  if start == nil or count == nil then return nil end
  -- A huge count refuses every take (INF); a refund of it is refused.
  return { start or INF, count or INF, first, debt }
end

function FIXEDWINDOW.latest(s)
  return s[1]
end

-- What a stored count in debt still owes in the window starting at
-- `start`: each window since repaid `limit` (fixed_window.rs carried).
local function fixed_carried(lim, s, start)
  if not s[4] or s[2] <= lim.limit then return 0 end
  local windows = 1
  if start - s[1] >= lim.w then windows = floor_div(start - s[1], lim.w) end
  local c = s[2] - windows * lim.limit
  if c < 0 then c = 0 end
  return c
end

-- The window counted at now: its start, count and end (with a stored
-- debt's carried in: only a state in debt, s[4], carries; never across
-- calendar windows).
local function fixed_counted(lim, s, now)
  if s and s[3] ~= lim.first then
    local stored = s[3] and 'FIRST' or 'EPOCH'
    fail('ERR this key\'s window was started with ALIGN ' .. stored .. ': call it with ALIGN ' .. stored .. ', or DEL the key first')
  end
  if lim.unit then
    if s and s[1] > now then
      local _, finish = calendar_window(lim, s[1])
      return s[1], s[2], finish
    end
    local start, finish = calendar_window(lim, now)
    if s and s[1] == start then return start, s[2], finish end
    return start, 0, finish
  end
  if s and s[1] > now then return s[1], s[2], s[1] + lim.w end
  if not lim.first then
    local start = now - fmod(now, lim.w)
    if s and s[1] == start then return start, s[2], start + lim.w end
    if s and s[4] then return start, fixed_carried(lim, s, start), start + lim.w end
    return start, 0, start + lim.w
  end
  if s and now < s[1] + lim.w then return s[1], s[2], s[1] + lim.w end
  if s and s[4] then
    local chain = s[1] + floor_div(now - s[1], lim.w) * lim.w
    local debt = fixed_carried(lim, s, chain)
    if debt > 0 then return chain, debt, chain + lim.w end
  end
  return now, 0, now + lim.w
end

-- When `count` in the window starting at `start` is repaid: that window's
-- end, or in debt a later one's (capped past the horizon).
local function fixed_repaid_at(lim, start, count, debt)
  local windows = 1
  if debt then
    local most = floor_div(MAX_PERIOD_US, lim.w) + 2
    if count >= TWO53 then
      windows = most
    else
      windows = ceil_div(count, lim.limit)
      if windows > most then windows = most end
      if windows < 1 then windows = 1 end
    end
  end
  return start + windows * lim.w
end

local function fixed_value(lim, start, count, debt)
  if debt then return format(lim.first and 'F%d:%d:D' or '%d:%d:D', start, count) end
  return format(lim.first and 'F%d:%d' or '%d:%d', start, count)
end

-- The decision with `c` counted in a window ending `to_end` from now.
local function fixed_decision(lim, limited, c, retry, to_end)
  local remaining = lim.limit - c
  if remaining < 0 then remaining = 0 end
  return { limited, lim.limit, remaining, retry, c > 0 and to_end or 0 }
end

function FIXEDWINDOW.take(lim, s, now, cost)
  local start, count, finish = fixed_counted(lim, s, now)
  if s and s[4] and count > lim.limit then
    -- In debt (fixed_window.rs decide_in_debt): refused, the retry in the
    -- first window whose carried count leaves room.
    local retry = false
    if cost <= lim.limit then retry = fixed_repaid_at(lim, start, count - lim.limit + cost, true) - now end
    return { true, lim.limit, 0, retry, fixed_repaid_at(lim, start, count, true) - now }
  end
  local to_end = finish - now
  if cost > lim.limit then return fixed_decision(lim, true, count, false, to_end) end
  local new_count = count + cost
  if new_count > lim.limit then return fixed_decision(lim, true, count, to_end, to_end) end
  local value
  if cost > 0 then value = fixed_value(lim, start, new_count, false) end
  return fixed_decision(lim, false, new_count, false, to_end), value, finish
end

-- The count past the limit (FORCE), carried into the next windows.
function FIXEDWINDOW.charge(lim, s, now, cost)
  local start, count, finish = fixed_counted(lim, s, now)
  local new_count = count + cost
  if new_count >= TWO53 then fail(E_FORCE.horizon) end
  -- A calendar window's count past the limit lasts to its end.
  local debt = new_count > lim.limit and not lim.unit
  local expire = debt and fixed_repaid_at(lim, start, new_count, true) or finish
  if expire - now > MAX_PERIOD_US then fail(E_FORCE.horizon) end
  return fixed_value(lim, start, new_count, debt), expire, { start, new_count, lim.first, debt }
end

function FIXEDWINDOW.refund(lim, s, now, tokens)
  if s == nil then return refunded(FIXEDWINDOW, lim, nil, now), nil end
  local start, count, finish = fixed_counted(lim, s, now)
  local debt = s[4] and count > lim.limit
  local new_count = count - tokens
  if new_count <= 0 then return refunded(FIXEDWINDOW, lim, nil, now), DELETE end
  if new_count >= TWO53 then fail(E_INEXACT_STATE) end
  debt = debt and new_count > lim.limit
  local ns = { start, new_count, s[3], debt }
  return refunded(FIXEDWINDOW, lim, ns, now), fixed_value(lim, start, new_count, debt), debt and fixed_repaid_at(lim, start, new_count, true) or finish
end
return FIXEDWINDOW
end

---------------------------------------------------------------------------
-- Sliding window counter (core/src/algorithm/sliding_window.rs). State:
-- `<window_start_us>:<previous>:<current>`.

-- Its keys expire within two windows: 732 days at most.
local function need_sliding()
if SLIDINGWINDOW then return SLIDINGWINDOW end
SLIDINGWINDOW = { command = 'RL.SLIDINGWINDOW', horizon = 2 * MAX_PERIOD_US }

function SLIDINGWINDOW.parse(a, at)
  local limit = integer(a, at, 'limit')
  local window_us = seconds_as_us(a, at + 1, 'window')
  check_limit_and_window(limit, window_us)
  return { limit = limit, w = window_us }
end

local function e_buckets_mismatch(stored)
  fail('ERR this key holds a sliding window ' .. stored .. ': call it the same way, or DEL the key first')
end

local function sliding_decode(inner)
  local c1 = find(inner, ':', 1, true)
  if c1 == nil then return nil end
  local c2 = find(inner, ':', c1 + 1, true)
  if c2 == nil then return nil end
  local a, b, c = parse_decimal(sub(inner, 1, c1 - 1)), parse_decimal(sub(inner, c1 + 1, c2 - 1)),
    parse_decimal(sub(inner, c2 + 1))
  if a == nil or b == nil or c == nil then return nil end
  if a == false then return { INF, 0, 0 } end
  if b == false or c == false then return false end
  return { a, b, c }
end

function SLIDINGWINDOW.latest(s)
  return s[1]
end

function SLIDINGWINDOW.decode(lim, inner)
  local s = sliding_decode(inner)
  if s == nil and byte(inner, 1) == 75 then e_buckets_mismatch('with BUCKETS') end
  return s
end

-- The windows as decide reads them: start, elapsed, previous, current, t.
local function sliding_view(lim, s, now)
  local w = lim.w
  local t = now
  if s and s[1] > now then t = s[1] end
  local start = t - fmod(t, w)
  local previous, current = 0, 0
  if s then
    if s[1] == start then
      previous, current = s[2], s[3]
    elseif s[1] == start - w then
      previous = s[3]
    end
  end
  return start, t - start, previous, current, t
end

function SLIDINGWINDOW.take(lim, s, now, cost)
  local w, limit = lim.w, lim.limit
  local start, elapsed, previous, current, t = sliding_view(lim, s, now)
  local ahead = t - now
  -- ⌈previous × (W − elapsed) / W⌉: the weighted previous count.
  local pq, pr = muldiv(previous, w - elapsed, 0, w)
  if pq == nil then fail(E_OVERFLOW) end
  local pc = pq + (pr > 0 and 1 or 0)
  -- The reply's remaining and reset with `current` counted.
  local remaining = limit - current - pc
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if current > 0 then reset = start + 2 * w - now elseif previous > 0 then reset = start + w - now end
  if cost > limit then
    return { true, limit, remaining, false, reset }
  end
  local headroom = limit - current - cost
  if pc <= headroom then
    local new_current = current + cost
    local value
    if cost > 0 then value = format('%d:%d:%d', start, previous, new_current) end
    remaining = limit - new_current - pc
    if remaining < 0 then remaining = 0 end
    if new_current > 0 then reset = start + 2 * w - now end
    return { false, limit, remaining, false, reset }, value, start + 2 * w
  end
  local retry
  if headroom >= 0 then
    -- Later in this window, as the previous window's weight drops.
    local q = muldiv(headroom, w, 0, previous)
    local d = 0
    if q ~= nil then
      d = (w - elapsed) - q
      if d < 0 then d = 0 end
    end
    retry = ahead + d
  else
    -- In the next window, where `current` becomes the previous count.
    local q = muldiv(limit - cost, w, 0, current)
    local e = 0
    if q ~= nil then
      e = w - q
      if e < 0 then e = 0 end
    end
    retry = (start + w - now) + e
  end
  return { true, limit, remaining, retry, reset }
end

function SLIDINGWINDOW.charge(lim, s, now, cost)
  local start, _, previous, current = sliding_view(lim, s, now)
  current = current + cost
  if current >= TWO53 then fail(E_OVERFLOW) end
  return format('%d:%d:%d', start, previous, current), start + 2 * lim.w, { start, previous, current }
end

function SLIDINGWINDOW.refund(lim, s, now, tokens)
  if s == nil then return refunded(SLIDINGWINDOW, lim, nil, now), nil end
  local start, _, previous, current = sliding_view(lim, s, now)
  local new_current = current - tokens
  if new_current < 0 then new_current = 0 end
  if previous == 0 and new_current == 0 then return refunded(SLIDINGWINDOW, lim, nil, now), DELETE end
  local ns = { start, previous, new_current }
  return refunded(SLIDINGWINDOW, lim, ns, now),
    format('%d:%d:%d', start, previous, new_current), start + 2 * lim.w
end

---------------------------------------------------------------------------
-- Sliding window over k sub-windows (core/src/algorithm/bucket_window.rs,
-- `RL.SLIDINGWINDOW … BUCKETS k`). State: `K`, the sub-window length and the
-- newest sub-window's index (zig-zag) as LEB128 varints, then the counts as
-- little-endian u32, newest first.

BUCKETWINDOW = { command = 'RL.SLIDINGWINDOW', horizon = 2 * MAX_PERIOD_US }
local char = string.char

function bucket_window_new(limit, window_us, k)
  check_limit_and_window(limit, window_us)
  if limit > 4294967295 then e_range('limit', '<= 4294967295 with BUCKETS') end
  if k < 2 or k > 60 then e_range('BUCKETS', '>= 2 and <= 60') end
  return { limit = limit, w = window_us, k = k, sub = ceil_div(window_us, k), alg = BUCKETWINDOW }
end

-- A varint at `i`: its value (nil: malformed; false: 2^53 or more) and the
-- next index.
local function take_varint(bytes, i)
  local value, scale = 0, 1
  for j = 0, 9 do
    local b = byte(bytes, i + j)
    if b == nil then return nil end
    local part = b % 128
    if j == 9 and part > 1 then return nil end
    value = value + part * scale
    scale = scale * 128
    if b < 128 then
      if value >= TWO53 then return false, i + j + 1 end
      return value, i + j + 1
    end
  end
  return nil
end

function BUCKETWINDOW.decode(lim, inner)
  if byte(inner, 1) ~= 75 then
    if sliding_decode(inner) ~= nil then e_buckets_mismatch('without BUCKETS') end
    return nil
  end
  local sub_us, i = take_varint(inner, 2)
  if sub_us == nil then return nil end
  local zigzag, j = take_varint(inner, i)
  if zigzag == nil then return nil end
  if sub_us == 0 then return nil end
  local rest = #inner - j + 1
  if rest == 0 or rest % 4 ~= 0 or rest / 4 > 60 then return nil end
  if sub_us == false or zigzag == false then
    -- A newest index or length of 2^53 or more: far ahead when the index
    -- is positive (zig-zag even: its first byte's low bit).
    if byte(inner, i) % 2 == 0 and zigzag ~= 0 then return { sub = 1, newest = INF, counts = {} } end
    return false
  end
  local newest = zigzag / 2
  if zigzag % 2 == 1 then newest = -(zigzag + 1) / 2 end
  local counts = {}
  for c = 1, rest / 4 do
    local b0, b1, b2, b3 = byte(inner, j + 4 * c - 4, j + 4 * c - 1)
    counts[c] = b0 + 256 * (b1 + 256 * (b2 + 256 * b3))
  end
  return { sub = sub_us, newest = newest, counts = counts }
end

function BUCKETWINDOW.latest(s)
  return s.newest * s.sub
end

local function put_varint(v)
  local out = ''
  while v >= 128 do
    local part = fmod(v, 128)
    out = out .. char(part + 128)
    v = (v - part) / 128
  end
  return out .. char(v)
end

local function u32le(c)
  local b0 = c % 256; c = (c - b0) / 256
  local b1 = c % 256; c = (c - b1) / 256
  local b2 = c % 256
  return char(b0, b1, b2, (c - b2) / 256)
end

-- The view at now: the current sub-window's index and view[i] (1-based:
-- view[1] is the current sub-window's count).
local function bucket_view(lim, s, now)
  local k, view = lim.k, {}
  for i = 1, k do view[i] = 0 end
  local now_index = floor_div(now, lim.sub)
  if s == nil then return now_index, view end
  if s.sub ~= lim.sub then
    local window_start = now - lim.w
    local sum = 0
    for i = 1, #s.counts do
      if (s.newest - (i - 1) + 1) * s.sub > window_start then sum = sum + s.counts[i] end
    end
    if sum > 4294967295 then sum = 4294967295 end
    view[1] = sum
    return now_index, view
  end
  local current = now_index
  if s.newest > current then current = s.newest end
  local shift = current - s.newest
  for i = 1, #s.counts do
    local at = shift + i
    if at <= k then view[at] = s.counts[i] end
  end
  return current, view
end

-- The encoded state of a view (nil when all is 0), and when it empties.
local function bucket_encode(lim, current, view)
  local first, last
  for i = 1, lim.k do
    if view[i] > 0 then
      first = first or i
      last = i
    end
  end
  if first == nil then return nil end
  local newest = current - (first - 1)
  local zigzag = newest >= 0 and 2 * newest or -2 * newest - 1
  local parts = { 'K', put_varint(lim.sub), put_varint(zigzag) }
  for i = first, last do parts[#parts + 1] = u32le(view[i]) end
  return table.concat(parts)
end

local function bucket_empty_at(lim, current, view)
  for i = 1, lim.k do
    if view[i] > 0 then return (current - (i - 1) + lim.k) * lim.sub end
  end
  return nil
end

local function bucket_window_decision(lim, limited, counted, retry, empty_at, now)
  local remaining = lim.limit - counted
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if empty_at then
    reset = empty_at - now
    if reset < 0 then reset = 0 end
  end
  return { limited, lim.limit, remaining, retry, reset }
end

function BUCKETWINDOW.take(lim, s, now, cost)
  local current, view = bucket_view(lim, s, now)
  local k = lim.k
  local counted = 0
  for i = 1, k do counted = counted + view[i] end
  if cost > lim.limit then
    return bucket_window_decision(lim, true, counted, false, bucket_empty_at(lim, current, view), now)
  end
  if counted + cost <= lim.limit then
    local value, expire
    if cost > 0 then
      local c = view[1] + cost
      if c > 4294967295 then c = 4294967295 end
      view[1] = c
      value, expire = bucket_encode(lim, current, view), bucket_empty_at(lim, current, view)
    end
    return bucket_window_decision(lim, false, counted + cost, false, bucket_empty_at(lim, current, view), now), value, expire
  end
  local empty = bucket_empty_at(lim, current, view)
  local left, retry = counted, false
  for i = k, 1, -1 do
    if view[i] ~= 0 then
      left = left - view[i]
      if left + cost <= lim.limit then
        retry = (current - (i - 1) + k) * lim.sub - now
        if retry < 1 then retry = 1 end
        break
      end
    end
  end
  return bucket_window_decision(lim, true, counted, retry, empty, now)
end

function BUCKETWINDOW.charge(lim, s, now, cost)
  local current, view = bucket_view(lim, s, now)
  local c = view[1] + cost
  if c > 4294967295 then fail(E_FORCE.sub) end
  view[1] = c
  local value = bucket_encode(lim, current, view)
  return value, bucket_empty_at(lim, current, view), BUCKETWINDOW.decode(lim, value)
end

function BUCKETWINDOW.refund(lim, s, now, tokens)
  if s == nil then return (BUCKETWINDOW.take(lim, nil, now, 0)), nil end
  local current, view = bucket_view(lim, s, now)
  local give = tokens
  for i = 1, lim.k do
    local take = view[i]
    if give < take then take = give end
    view[i] = view[i] - take
    give = give - take
  end
  local value = bucket_encode(lim, current, view)
  local new_state = value and BUCKETWINDOW.decode(lim, value)
  local d = BUCKETWINDOW.take(lim, new_state, now, 0)
  if value == nil then return d, DELETE end
  return d, value, bucket_empty_at(lim, current, view)
end
return SLIDINGWINDOW
end

---------------------------------------------------------------------------
-- CL.THROTTLE (core/src/algorithm/cell.rs): redis-cell's GCRA in
-- nanoseconds. Instants and durations in ns are kept as pairs (µs, ns) with
-- 0 <= ns < 1000, exact where a ns count passes 2^53. State: the TAT in ns
-- (decimal), or below 10^17 a TAT in µs.

local function need_cell()
if CELL then return CELL end
CELL = { command = 'CL.THROTTLE' }

local function pair_sub(aus, ans, bus, bns)
  local us, ns = aus - bus, ans - bns
  if ns < 0 then ns = ns + 1000; us = us - 1 end
  return us, ns
end

local function pair_add(aus, ans, bus, bns)
  local us, ns = aus + bus, ans + bns
  if ns >= 1000 then ns = ns - 1000; us = us + 1 end
  return us, ns
end

-- a > b
local function pair_gt(aus, ans, bus, bns)
  return aus > bus or (aus == bus and ans > bns)
end

function cell_new(max_burst, cpp, period_secs, raw_burst)
  if max_burst < 0 then e_range('max_burst', '>= 0') end
  if cpp < 1 then e_range('count_per_period', '>= 1') end
  if period_secs < 1 then e_period('period') end
  if period_secs > 31622400 then e_range('period', '>= 1 and <= 31622400 (366 days)') end
  -- redis-cell's f64 division, truncated.
  local t = floor(period_secs * 1e9 / cpp)
  if t < 1000 then e_rate('count_per_period') end
  if raw_burst == I64_MAX then fail(E_OVERFLOW) end
  local limit = max_burst + 1
  local t_ns = fmod(t, 1000)
  local t_us = (t - t_ns) / 1000
  -- τ = T × limit ns, as (µs, ns).
  local tau_us, tau_ns
  if limit > 1e17 then
    fail(E_OVERFLOW)
  end
  local q, r = muldiv(t_ns, limit, 0, 1000)
  tau_us, tau_ns = t_us * limit + (q or TWO53), r
  if tau_us > 9e16 or (tau_us == 9e16 and tau_ns > 0) then fail(E_OVERFLOW) end
  if tau_us > MAX_PERIOD_US or (tau_us == MAX_PERIOD_US and tau_ns > 0) then fail(E_REFILL) end
  return { t_us = t_us, t_ns = t_ns, limit = limit, tau_us = tau_us, tau_ns = tau_ns, alg = CELL }
end

-- max_burst count_per_period period at `at`; the quantity after them, if
-- any, is checked between their parsing and their ranges, as the module
-- does (the command reads it again: a parsed limit is cached).
function CELL.parse(a, at)
  local max_burst = integer(a, at, 'max_burst')
  local cpp = integer(a, at + 1, 'count_per_period')
  local period = integer_at_least(a, at + 2, 'period', 1, '>= 1 and <= 31622400 (366 days)')
  if a[at + 3] ~= nil then integer_at_least(a, at + 3, 'quantity', 0, '>= 0') end
  return cell_new(max_burst, cpp, period, a[at])
end

function CELL.decode(lim, inner)
  local n = #inner
  if n == 0 or n > 19 or find(inner, '%D') then return nil end
  local z = find(inner, '[^0]')
  local digits = z and sub(inner, z) or '0'
  if #digits == 19 and digits > I64_MAX then return nil end
  if #digits >= 18 then
    -- ≥ 10^17: nanoseconds.
    return { tonumber(sub(digits, 1, -4)), tonumber(sub(digits, -3)) }
  end
  local us = parse_decimal(digits)
  return { us or INF, 0 }
end

-- The TAT in µs (rounded down).
function CELL.latest(tat)
  return tat[1]
end

local function cell_remaining(lim, ttl_us, ttl_ns)
  local nus, nns = pair_sub(lim.tau_us, lim.tau_ns, ttl_us, ttl_ns)
  -- next <= −T: nothing left.
  local mus, mns = pair_sub(0, 0, lim.t_us, lim.t_ns)
  if not pair_gt(nus, nns, mus, mns) then return 0 end
  -- next / 1000 toward zero, divided in f64 by T / 1000, toward zero.
  local a = nus
  if nus < 0 and nns > 0 then a = nus + 1 end
  local count = a / lim.t_us
  if count < 0 then count = -floor(-count) else count = floor(count) end
  if count < 0 then count = 0 end
  if count > lim.limit then count = lim.limit end
  return count
end

local function cell_decision(lim, cost, limited, ttl_us, ttl_ns, retry_us)
  local remaining = cell_remaining(lim, ttl_us, ttl_ns)
  if retry_us then
    if cost - 1 < remaining then remaining = cost - 1 end
    if remaining < 0 then remaining = 0 end
  end
  return { limited, lim.limit, remaining, retry_us or false, ttl_us }
end

function CELL.take(lim, tat, now, cost)
  local tus, tns = now, 0
  if tat and pair_gt(tat[1], tat[2], now, 0) then tus, tns = tat[1], tat[2] end
  local ttl_us, ttl_ns = pair_sub(tus, tns, now, 0)
  if cost > lim.limit then return cell_decision(lim, cost, true, ttl_us, ttl_ns, nil) end
  local q, r = muldiv(lim.t_ns, cost, 0, 1000)
  local ius, ins = lim.t_us * cost + q, r
  local nus, nns = pair_add(tus, tns, ius, ins)
  local lus, lns = pair_sub(nus, nns, now, 0)
  if pair_gt(lus, lns, lim.tau_us, lim.tau_ns) then
    local rus = pair_sub(lus, lns, lim.tau_us, lim.tau_ns)
    return cell_decision(lim, cost, true, ttl_us, ttl_ns, rus)
  end
  local value
  if ius > 0 or ins > 0 then
    if nus >= 1e14 then
      value = format('%d%03d', nus, nns)
    else
      value = dec(nus + (nns > 0 and 1 or 0))
    end
  end
  return cell_decision(lim, cost, false, lus, lns, nil), value, nus + (nns > 0 and 1 or 0)
end

-- Seconds as redis-cell replies them: whole seconds, plus one for a
-- non-zero millisecond part.
local function reply_secs(us)
  local r = fmod(us, 1000000)
  local secs = (us - r) / 1000000
  local ms = r / 1000
  if ms < 0 then ms = -floor(-ms) else ms = floor(ms) end
  if ms > 0 then secs = secs + 1 end
  return secs
end

-- The five integers in seconds (CL.THROTTLE).
function reply_secs5(d)
  local retry = -1
  if d[4] then
    retry = reply_secs(d[4])
    if d[1] and retry < 1 then retry = 1 end
  end
  return { d[1] and 1 or 0, d[2], d[3], retry, reply_secs(d[5]) }
end
return CELL
end

---------------------------------------------------------------------------
-- Storage of string states (src/command/decide/storage.rs) with their block
-- (core/src/algorithm/block.rs: `B<blocked_until_us>;` + the state).

local function blocked_decision(d, block_end, now)
  local left = block_end - now
  local never = d[1] and not d[4]
  local retry = false
  if not never then
    retry = d[4] or 0
    if left > retry then retry = left end
  end
  local reset = d[5]
  if left > reset then reset = left end
  return { true, d[2], 0, retry, reset }
end

local function ceil_ms(us)
  local r = fmod(us, 1000)
  local q = (us - r) / 1000
  if r ~= 0 then q = q + 1 end
  return q
end

-- Plans one string-state limiter: reads the key, decides at `at.now`.
-- Returns the decision and the write: nothing (nil), DELETE, or the value
-- and its expiry in ms (SET … PXAT).
local MAX_STATE_BYTES = 281 -- recognize::MAX_STATE_BYTES: B<i64>; + a bucketed state

local function plan_string(key, alg, lim, at)
  local now = at.now
  -- At most one byte more than any state is read, whatever another client
  -- stored (GET of a 64 MiB string took 345-563 ms; STRLEN then GET costs
  -- a call more than this): longer than any state, not one. An empty
  -- reply is an empty string or no key.
  local stored = rpcall('GETRANGE', key, '0', '281')
  if type(stored) == 'table' then fail(E_WRONGTYPE) end
  if stored == '' and rcall('EXISTS', key) == 0 then stored = false end
  if stored and #stored > MAX_STATE_BYTES then e_invalid(alg.command) end
  local block_end, inner = nil, stored
  if stored and byte(stored, 1) == 66 then -- B
    local semi = find(stored, ';', 2, true)
    if semi == nil then e_invalid(alg.command) end
    block_end = parse_decimal(sub(stored, 2, semi - 1))
    if block_end == nil then e_invalid(alg.command) end
    if block_end == false then block_end = INF end
    inner = sub(stored, semi + 1)
  end
  local state
  if stored and not (block_end and inner == '') then
    state = alg.decode(lim, inner)
    if state == nil then e_invalid(alg.command) end
    if state == false then fail(E_INEXACT_STATE) end
  end
  -- A state or block more than 366 days ahead is not one the module wrote.
  local latest = state and alg.latest(state)
  if block_end and (latest == nil or block_end > latest) then latest = block_end end
  if latest and latest > now + MAX_PERIOD_US then e_foreign(key, alg.command, NOT_OURS_AHEAD) end
  -- Every expiry written is at most the horizon ahead.
  local cap = now + (alg.horizon or MAX_PERIOD_US)
  local in_force = block_end and block_end > now and block_end or nil
  if not at.refund then
    local d, value, expire
    if at.force then
      d, value, expire = forced(alg, lim, state, now, at.n)
    else
      d, value, expire = alg.take(lim, state, now, at.n)
    end
    if in_force then d = blocked_decision(d, in_force, now) end
    if not d[1] then
      if value then
        if expire > cap then expire = cap end
        return d, value, ceil_ms(expire)
      end
      return d
    end
    if at.force then
      -- Recorded past the limit or during a block (plan.rs): behind the
      -- block BLOCK starts or extends, or the one in force.
      if expire > cap then expire = cap end
      local until_ = in_force
      if at.block_us and d[4] then
        until_ = now + at.block_us
        if in_force and in_force > until_ then until_ = in_force end
        d = blocked_decision(d, until_, now)
      end
      if until_ then
        if until_ > expire then expire = until_ end
        return d, 'B' .. dec(until_) .. ';' .. value, ceil_ms(expire)
      end
      return d, value, ceil_ms(expire)
    end
    if at.block_us and stored and d[4] then
      local new_until = now + at.block_us
      if in_force and in_force > new_until then new_until = in_force end
      d = blocked_decision(d, new_until, now)
      local ms = rpcall('PEXPIRETIME', key)
      if type(ms) ~= 'number' then
        -- Redis 6.2: no PEXPIRETIME; the key's expiry is read when the block
        -- is written (expire_time_ms), the server's clock never read.
        return d, 'B' .. dec(new_until) .. ';' .. inner, { at_least = ceil_ms(new_until), cap = ceil_ms(cap) }
      end
      local current_us = ms > 0 and ms * 1000 or 0
      if current_us > cap then current_us = cap end
      if new_until > current_us then current_us = new_until end
      return d, 'B' .. dec(new_until) .. ';' .. inner, ceil_ms(current_us)
    end
    return d
  end
  local d, value, expire = alg.refund(lim, state, now, at.n)
  if value == DELETE then
    if in_force then return d, 'B' .. dec(in_force) .. ';', ceil_ms(in_force) end
    return d, DELETE
  end
  if value then
    if expire > cap then expire = cap end
    if in_force then
      if in_force > expire then expire = in_force end
      return d, 'B' .. dec(in_force) .. ';' .. value, ceil_ms(expire)
    end
    return d, value, ceil_ms(expire)
  end
  return d
end

-- The absolute expiry of `key` (ms; -1 for none): PEXPIRETIME, or on Redis
-- 6.2 its PTTL and the server's clock, learned without TIME (which the caller
-- giving NOW may be refused; PTTL counts from the server's clock, not from
-- NOW): the key made to expire at FAR_MS, a known instant, its PTTL is then
-- FAR_MS less the server's clock. It writes the key's expiry: call it only
-- when writing the key (the caller sets the expiry next).
local function expire_time_ms(key)
  local ms = rpcall('PEXPIRETIME', key)
  if type(ms) ~= 'number' then
    local ttl = rcall('PTTL', key)
    if ttl < 0 then return -1 end
    rcall('PEXPIREAT', key, dec(FAR_MS))
    ms = FAR_MS - rcall('PTTL', key) + ttl
  end
  return ms
end

-- Numbers go to redis.call as decimal strings (dec): a number argument is
-- written with %.17g on Redis 6.2 and 7.0 (snprintf: 2-4k instructions),
-- string.format("%d") costs about 1.8k.
local function apply_string(key, value, expire_ms)
  if value == DELETE then
    rcall('DEL', key)
  elseif type(expire_ms) == 'table' then
    -- A block on Redis 6.2 (plan_string): the key keeps its expiry, capped,
    -- and at least to the block's end.
    rcall('SET', key, value, 'KEEPTTL')
    local ms = expire_time_ms(key)
    if ms > expire_ms.cap then ms = expire_ms.cap end
    if ms < expire_ms.at_least then ms = expire_ms.at_least end
    rcall('PEXPIREAT', key, dec(ms))
  else
    rcall('SET', key, value, 'PXAT', dec(expire_ms))
  end
end

---------------------------------------------------------------------------
-- Sliding log (core/src/algorithm/sliding_log.rs, src/command/sliding_log.rs):
-- a sorted set of accepted tokens scored by their µs timestamp, members
-- small integers below max(2 × limit, 128); a block is the member "B"
-- scored by its end.

-- What the sliding log and the concurrency limit share (both sorted sets
-- under one call budget, with a block "B"): built by need_sorted_sets, once
-- for either.
local function need_sorted_sets()
if score_us then return end

-- The decimal string of a small non-negative integer (a log's member, a
-- slot's number), memoized: a table lookup instead of string.format, once
-- per entry a call adds (SMALL_DEC[x] or small_dec(x)). Bounded: emptied
-- at 4096 entries.
SMALL_DEC = {}
local small_decs = 0
function small_dec(x)
  local s = SMALL_DEC[x]
  if s == nil then
    s = format('%d', x)
    if small_decs >= 4096 then SMALL_DEC, small_decs = {}, 0 end
    SMALL_DEC[x] = s
    small_decs = small_decs + 1
  end
  return s
end

-- The member check of a kind of sorted set, `check`, memoized in kind.ok
-- (member → true or false, which the walks read first: a table lookup per
-- member, no call) for members of at most `short` bytes (a longer one is
-- checked each time, never kept). Bounded: emptied at 4096 entries.
function memo_check(kind, short, check)
  local size = 0
  kind.ok = {}
  return function(member)
    local r = check(member)
    if #member <= short then
      if size >= 4096 then kind.ok, size = {}, 0 end
      kind.ok[member] = r
      size = size + 1
    end
    return r
  end
end

-- The arguments of the ZADD that adds a call's entries, reused (filled
-- from 1, passed with their count): no table grown entry by entry.
ZADD_ARGS = {}

function e_over_budget(entries)
  fail('ERR this call may touch ' .. dec(entries) .. ' sliding-log entries (limit + TOKENS of each SLIDINGLOG), more than the module\'s sliding-log-call-budget of ' .. dec(SLIDING_LOG_CALL_BUDGET) .. '; use fewer or smaller SLIDINGLOG limits, or RL.SLIDINGWINDOW')
end

-- The entries a call of `tokens` may touch: limit + min(tokens, limit).
function log_entries(lim, tokens)
  if tokens > lim.limit then return lim.limit + lim.limit end
  if tokens < 0 then return lim.limit end
  return lim.limit + tokens
end

-- A forced call's entries (sliding_log.rs forced_call_entries): a log in
-- debt holds up to twice its limit in its window.
function log_forced_entries(lim, tokens)
  local most = 2 * lim.limit
  if tokens > most then return most + most end
  return most + tokens
end

-- A score as the module reads it (`as i64`: toward zero).
function score_us(score)
  if score < 0 then return -floor(-score) end
  return floor(score)
end

-- A block's write {block_end, cap}: the member B scored by its end; the
-- key's expiry kept, capped at the horizon, and at least the block's end.
function apply_log_block(key, w)
  rcall('ZADD', key, dec(w.block_end), 'B')
  local current = expire_time_ms(key)
  if current < 0 then current = 0 end
  local cap_ms = ceil_ms(w.cap)
  if current > cap_ms then current = cap_ms end
  local ms = ceil_ms(w.block_end)
  if current > ms then ms = current end
  rcall('PEXPIREAT', key, dec(ms))
end

-- A member of z's set that the module cannot have written.
function e_zset_member(kind, z)
  e_foreign(z.key, kind.cmd, NOT_OURS_MEMBER)
end

-- A fast path's read of the set at `key` handed to the full path (a
-- kind's `read`, for one call): `asc`, its first entries by rank with
-- their scores (member, score, …), the whole set when it holds no more.
-- The full path's reads take from it the entries it holds, and read only
-- the others: a member of another client's may be long, and each read
-- copies it into Lua. Nil: none for that key.
local function handed(kind, key)
  local read = kind.read
  if read and read.key == key then return read.asc end
  return nil
end

-- z.desc (`desc`, `held` entries) followed by `more`, the entries after
-- them: a small one rebuilt at its size at once (not grown entry by entry).
function z_desc_extend(z, desc, held, more)
  if held == 1 then
    desc = { desc[1], desc[2], unpack(more) }
  elseif held == 2 then
    desc = { desc[1], desc[2], desc[3], desc[4], unpack(more) }
  else
    for i = 1, #more do desc[2 * held + i] = more[i] end
  end
  z.desc = desc
  return desc
end

-- The entries of z's set from its `offset`-th newest on, `count` of them,
-- with their scores (ZREVRANGEBYSCORE key +inf -inf WITHSCORES LIMIT
-- offset count): those a hand-over holds, or that this call read already
-- (z.desc: the newest entries by rank with their scores, a fast path's
-- `read.top` at first), not read again. Read only: may be z.desc itself.
function z_top(kind, z, offset, count)
  local asc = handed(kind, z.key)
  if asc == nil then
    local desc = z.desc
    if not desc then
      local got = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', dec(offset), dec(count))
      if offset == 0 then z.desc = got end
      return got
    end
    local held = #desc / 2
    local stop = offset + count
    if stop > z.len then stop = z.len end
    if stop > held then
      -- Past what the call holds: the rest read, kept when it follows on.
      local from = offset > held and offset or held
      local more = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', dec(from), dec(stop - from))
      if from == held then
        desc = z_desc_extend(z, desc, held, more)
        held = #desc / 2
        if stop > held then stop = held end
      end
      if from == offset then return more end
    end
    if offset == 0 and stop == held then return desc end
    if offset >= stop then return {} end
    return { unpack(desc, 2 * offset + 1, 2 * stop) }
  end
  -- By rank from the lowest: hi down to lo; the hand-over holds 0 … held − 1.
  local held = #asc / 2
  local hi, lo = z.len - 1 - offset, z.len - offset - count
  if lo < 0 then lo = 0 end
  local got = {}
  if hi >= held then
    local above = hi - (lo > held and lo or held) + 1
    got = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', dec(offset), dec(above))
    hi = hi - above
  end
  for r = hi, lo, -1 do
    got[#got + 1] = asc[2 * r + 1]
    got[#got + 1] = asc[2 * r + 2]
  end
  return got
end

-- The members of z's set scored at `old_max` or before, the oldest first,
-- `fetch` at most (ZRANGEBYSCORE key -inf old_max LIMIT 0 fetch), or
-- (`after`) those scored after it, the newest first (ZREVRANGEBYSCORE key
-- +inf (old_max LIMIT 0 fetch): those the hand-over `asc` holds not read
-- again.
local function z_handed_range(z, asc, old_max, fetch, after)
  local held, got = #asc / 2, {}
  if not after then
    local n = 0
    while n < held and n < fetch and tonumber(asc[2 * n + 2]) <= old_max do
      got[n + 1] = asc[2 * n + 1]
      n = n + 1
    end
    if n == held and n < fetch and held < z.len then
      local rest = rcall('ZRANGEBYSCORE', z.key, '-inf', dec(old_max), 'LIMIT', dec(held), dec(fetch - held))
      for i = 1, #rest do got[n + i] = rest[i] end
    end
    return got
  end
  -- The newest entries, above what the hand-over holds, read first.
  local above = z.len - held
  if above > 0 then
    got = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '(' .. dec(old_max), 'LIMIT', '0', dec(fetch < above and fetch or above))
    if #got < above then return got end
  end
  for r = held - 1, 0, -1 do
    if #got >= fetch or tonumber(asc[2 * r + 2]) <= old_max then break end
    got[#got + 1] = asc[2 * r + 1]
  end
  return got
end

-- The members of z's set scored after `old_max`, the newest first, `count`
-- at most (ZREVRANGEBYSCORE key +inf (old_max LIMIT 0 count): those this
-- call read already (z.desc, then z.above: a walk's, its newest entries by
-- rank without scores) not read again; what it reads kept as z.above.
local function z_above(z, old_max, count)
  local desc, above = z.desc, z.above
  local got, n = {}, 0
  if desc then
    for r = 0, #desc / 2 - 1 do
      if n >= count or tonumber(desc[2 * r + 2]) <= old_max then return got end
      n = n + 1
      got[n] = desc[2 * r + 1]
    end
  end
  if above and z.above_max == old_max then
    for i = n + 1, #above do
      if n >= count then return got end
      n = n + 1
      got[n] = above[i]
    end
    if z.above_all then return got end
  end
  if n >= count or n >= z.len then return got end
  local more = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '(' .. dec(old_max), 'LIMIT', dec(n), dec(count - n))
  for i = 1, #more do got[n + i] = more[i] end
  z.above, z.above_max, z.above_all = got, old_max, #more < count - n
  return got
end

-- The sorted set of `key` at `now`, of `kind` (LOG_SET, LEASE_SET: the
-- command its errors name, its most entries, its member checks), for the
-- lease `id` (a lease set's; nil for a log): nil for no key, else {key, len,
-- id, newest, member (a log's newest entry's integer), blocked, probe};
-- errors for another type, a set longer than any of its kind, a foreign
-- newest entry, a newest entry or block beyond the horizon. `probe`
-- (optional): a member whose score it reads with the block's, as z.probe
-- (false: absent; nil: not read).
function zset_open(kind, key, now, id, probe)
  local len = rpcall('ZCARD', key)
  if type(len) ~= 'number' then fail(E_WRONGTYPE) end
  if len == 0 then return nil end
  if len > kind.max_len then e_foreign(key, kind.cmd, NOT_OURS_TOO_LONG) end
  -- The newest entry, and the next one when that is the block: no member
  -- read that the module does not read (one of another client's may be
  -- long: each read copies it).
  -- Built with its fields (not grown field by field: each growth rehashes).
  -- What a fast path read of the set (kind.read) is not read again: its
  -- newest entries (top), and its old ones (old, the oldest first): when
  -- they are the whole set, the newest of them, or the next past the
  -- block, one the module cannot have written is refused unread.
  local read, top = kind.read, nil
  if read and read.key == key then
    top = read.top
    local old = read.old
    if not top and old and #old == len then
      local m = old[len]
      if m == 'B' then m = old[len - 1] end
      if m ~= nil and m ~= 'B' and kind.newest(m) == nil then e_invalid(kind.cmd) end
    end
  end
  local z = { key = key, len = len, id = id, desc = top or false }
  top = z_top(kind, z, 0, 1)
  local block_score
  if top[1] == 'B' then
    block_score = top[2]
    top = z_top(kind, z, 1, 1)
  end
  local member = top[1]
  if member ~= nil then
    -- Never the block's B here (set members are unique).
    local score = tonumber(top[2])
    local read = kind.newest(member)
    if not (score == score and score > -INF and score < INF and score == floor(score) and score >= 1e14
        and read ~= nil) then
      e_invalid(kind.cmd)
    end
    z.newest = score_us(score)
    if read ~= true then z.member = read end
  end
  if block_score then
    z.blocked = score_us(tonumber(block_score))
  elseif probe then
    -- The block's score and the probe's (a lease's first slot), in one call.
    local got = rcall('ZMSCORE', key, 'B', probe)
    if got[1] then z.blocked = score_us(tonumber(got[1])) end
    z.probe = got[2]
  else
    local b = rcall('ZSCORE', key, 'B')
    if b then z.blocked = score_us(tonumber(b)) end
  end
  local latest = z.newest
  if z.blocked and (latest == nil or z.blocked > latest) then latest = z.blocked end
  if latest and latest > now + MAX_PERIOD_US then e_foreign(key, kind.cmd, NOT_OURS_AHEAD) end
  return z
end

-- How many entries (not the block) are scored after `old_max`, up to
-- `at_most`: the set's length less its old entries (scored at `old_max` or
-- before) when at most at_most are old (and the kind does not check what it
-- counts: a lease set does), else counted from the newest; every member
-- walked checked. `want` (optional) fetches that many of the oldest
-- old entries at least, kept as z.old for the removal an allowed call makes
-- (z_old_members). A sliding log's old entries are those at its window's
-- start or before, a lease set's those expired by now.
function zset_count_after(kind, z, old_max, at_most, want)
  if z == nil then return 0 end
  local OK, is_member = kind.ok, kind.is_member
  if at_most < 0 then at_most = 0 end
  local fetch = at_most + 1
  if want and want > fetch then fetch = want end
  -- The same read by a fast path that handed the call over (kind.read):
  -- not read again (a member of another client's may be long).
  local read, old = kind.read
  local asc = read and read.asc and handed(kind, z.key)
  -- Nor read again by a second count (FORCE's): what the first fetched,
  -- and only the rest when it may not be all.
  if asc then
    old = z_handed_range(z, asc, old_max, fetch)
  elseif read and read.key == z.key and read.old_max == old_max and read.fetch == fetch then
    old = read.old
  elseif z.old and z.old_max == old_max then
    old = z.old
    local held = #old
    if held == z.fetch and held < fetch then
      local rest = rcall('ZRANGEBYSCORE', z.key, '-inf', dec(old_max), 'LIMIT', dec(held), dec(fetch - held))
      old = { unpack(old) }
      for i = 1, #rest do old[held + i] = rest[i] end
    end
  else
    old = rcall('ZRANGEBYSCORE', z.key, '-inf', dec(old_max), 'LIMIT', '0', dec(fetch))
  end
  if z.fetch == nil or fetch > z.fetch then z.fetch = fetch end
  z.old, z.old_max = old, old_max
  local n = #old
  if n > at_most + 1 then n = at_most + 1 end
  for i = 1, n do
    local m = old[i]
    local ok = OK[m]
    if ok == nil then ok = is_member(m) end
    if not ok then e_zset_member(kind, z) end
  end
  if n <= at_most and not kind.check_counted then
    local live = z.len - n
    if z.blocked and z.blocked > old_max then live = live - 1 end
    if live < 0 then live = 0 end
    if live > at_most then live = at_most end
    return live
  end
  local live = 0
  -- None is newer when the newest entry (zset_open's, read and checked) is
  -- old: the walk would meet nothing but the block.
  if at_most > 0 and z.newest ~= nil and z.newest > old_max then
    local got
    if asc then
      got = z_handed_range(z, asc, old_max, at_most + 1, true)
    else
      got = z_above(z, old_max, at_most + 1)
    end
    for i = 1, #got do
      local m = got[i]
      if m ~= 'B' then
        local ok = OK[m]
        if ok == nil then ok = is_member(m) end
        if not ok then e_zset_member(kind, z) end
        live = live + 1
        if live >= at_most then break end
      end
    end
  end
  return live
end

-- The first `n` (at most) of the old entries zset_count_after fetched,
-- each checked: what an allowed call removes, read before any key of the
-- call is written. At most what the call's budget has left (at.stale_left,
-- shared by its limits in order, src/command/decide/mod.rs check_budget),
-- which it spends; the others stay (never counted) for later calls.
function z_old_members(kind, z, n, at)
  local left = at.stale_left or SLIDING_LOG_CALL_BUDGET
  if n > left then n = left end
  local fetched = z.old or {}
  if n > #fetched then n = #fetched end
  local members = {}
  local OK, is_member = kind.ok, kind.is_member
  for i = 1, n do
    local m = fetched[i]
    local ok = OK[m]
    if ok == nil then ok = is_member(m) end
    if not ok then e_zset_member(kind, z) end
    members[i] = m
  end
  at.stale_left = left - #members
  return members
end

-- The old entries to fetch for the removal: `want`, within what the call's
-- budget has left (`left`, nil: the whole budget).
function stale_want(want, left)
  if left and left < want then
    if left < 0 then return 0 end
    return left
  end
  return want
end
end

local function need_slidinglog()
if SLIDINGLOG then return SLIDINGLOG end
need_sorted_sets()
SLIDINGLOG = { command = 'RL.SLIDINGLOG' }

function SLIDINGLOG.parse(a, at)
  local limit = integer(a, at, 'limit')
  local window_us = seconds_as_us(a, at + 1, 'window')
  -- The setting (fixed at the module's default, below its own maximum) first:
  -- every too-large limit reads one way, as in the module.
  if limit > SLIDING_LOG_MAX_LIMIT then
    fail('ERR limit must be <= ' .. dec(SLIDING_LOG_MAX_LIMIT) .. ' (the module\'s sliding-log-max-limit); for larger limits use RL.SLIDINGWINDOW')
  end
  if limit < 1 then e_range('limit', '>= 1') end
  if window_us < 1 or window_us > MAX_PERIOD_US then e_period('window') end
  local lim = { limit = limit, w = window_us }
  local entries = log_entries(lim, 1)
  if entries > SLIDING_LOG_CALL_BUDGET then e_over_budget(entries) end
  return lim
end

-- The integer of a log entry's member the module can have written (below
-- 200000, in the server's canonical form), else false. Memoized for the
-- short members (every such member has at most 6 bytes; a longer one is
-- never kept): a table lookup instead of a pattern and strtod, for each
-- member a call walks. Bounded: emptied at 4096 entries.
local LOG_ID, log_ids = {}, 0
local function log_id(member)
  if #member > 6 then return false end
  local id = LOG_ID[member]
  if id == nil then
    id = to_int(member)
    if not (id ~= nil and id >= 0 and id < 2 * SLIDING_LOG_HARD_MAX) then id = false end
    if log_ids >= 4096 then LOG_ID, log_ids = {}, 0 end
    LOG_ID[member] = id
    log_ids = log_ids + 1
  end
  return id
end

-- The sliding log as a kind of sorted set (zset_open; the module's
-- checked_zset): the command its errors name, the most entries a log can
-- hold (twice the largest limit, and the block), its member check
-- (is_member, memoized in ok).
local LOG_SET = {
  cmd = 'RL.SLIDINGLOG', max_len = 2 * SLIDING_LOG_HARD_MAX + 1,
  -- The newest entry's member: its integer, nil if not the module's.
  newest = function(member)
    return log_id(member) or nil
  end,
}

-- A log member the module can have written: an integer below 200000 (in the
-- server's canonical form) or the block's B.
local is_log_member = memo_check(LOG_SET, 6, function(member)
  return member == 'B' or log_id(member) ~= false
end)
LOG_SET.is_member = is_log_member
SLIDINGLOG.is_member = is_log_member
SLIDINGLOG.set = LOG_SET

-- The log of `key` at `now` (zset_open), with `member`: the newest entry's
-- integer member.
local function log_open(key, now)
  local z = zset_open(LOG_SET, key, now)
  return z
end

-- The score of the k-th (0-based) newest entry, not the block; every
-- member walked checked. Of the newest k + 2 entries (ZREVRANGEBYSCORE key
-- +inf -inf WITHSCORES LIMIT 0 k+2), those the call read already (z.desc
-- with their scores, z.above without: then the one score wanted read
-- alone) are not read again; what it reads kept in z.desc when `keep`
-- (the call reads on: FORCE).
local function log_nth_newest(z, k, keep)
  if z == nil then return nil end
  local want = k + 2
  if want > z.len then want = z.len end
  local desc, above = z.desc, z.above
  local held = desc and #desc / 2 or 0
  local known = held
  if above and #above > known then known = #above end
  if known > want then known = want end
  local seen = 0
  for r = 0, known - 1 do
    local m = r < held and desc[2 * r + 1] or above[r + 1]
    if m ~= 'B' then
      if not is_log_member(m) then e_zset_member(LOG_SET, z) end
      if seen == k then
        local s = r < held and desc[2 * r + 2] or rcall('ZSCORE', z.key, m)
        return score_us(tonumber(s))
      end
      seen = seen + 1
    end
  end
  if known >= want then return nil end
  -- The rest, read (kept when it follows on what the call holds).
  local got = rcall('ZREVRANGEBYSCORE', z.key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', dec(known), dec(want - known))
  if keep and desc and known == held then z_desc_extend(z, desc, held, got) end
  for i = 1, #got, 2 do
    local m = got[i]
    if m ~= 'B' then
      if not is_log_member(m) then e_zset_member(LOG_SET, z) end
      if seen == k then return score_us(tonumber(got[i + 1])) end
      seen = seen + 1
    end
  end
  return nil
end

function SLIDINGLOG.take(lim, z, now, cost, left, keep)
  local newest = z and z.newest
  local t = now
  if newest and newest > now then t = newest end
  local cutoff = t - lim.w
  -- An allowed call (cost <= limit) removes up to cost + 128 stale entries
  -- (within what the call's budget has left).
  local removable = cost
  if removable > lim.limit then removable = lim.limit end
  local live = zset_count_after(LOG_SET, z, cutoff, lim.limit + 1, stale_want(removable + STALE_REMOVED_PER_CALL, left))
  local reset = 0
  if newest and live > 0 then reset = newest + lim.w - now end
  local remaining = lim.limit - live
  if remaining < 0 then remaining = 0 end
  if cost > lim.limit then return { true, lim.limit, remaining, false, reset } end
  if live + cost > lim.limit then
    local retry = reset
    local ts = log_nth_newest(z, lim.limit - cost, keep)
    if ts then retry = ts + lim.w - now end
    if retry < 1 then retry = 1 end
    return { true, lim.limit, remaining, retry, reset }
  end
  local expire = t + lim.w
  local upd
  if cost > 0 then
    reset = expire - now
    upd = { cutoff = cutoff, remove_at_most = cost + STALE_REMOVED_PER_CALL, at = t, count = cost, expire = expire, live = live }
  end
  return { false, lim.limit, lim.limit - live - cost, false, reset }, upd
end

-- FORCE (sliding_log.rs force): the entries logged past the limit, at
-- most twice the limit in the window.
function SLIDINGLOG.force(lim, z, now, cost, left)
  local d, upd = SLIDINGLOG.take(lim, z, now, cost, left, true)
  if not d[1] then return d, upd end
  local newest = z and z.newest
  local t = now
  if newest and newest > now then t = newest end
  local cutoff = t - lim.w
  local most = 2 * lim.limit
  local live = zset_count_after(LOG_SET, z, cutoff, most + 1, stale_want(cost + STALE_REMOVED_PER_CALL, left))
  if cost > most - live then fail(E_FORCE.log) end
  local expire = t + lim.w
  local k = lim.limit - 1
  local retry
  if k < cost then
    retry = t + lim.w - now
  else
    retry = 0
    local ts = log_nth_newest(z, k - cost)
    if ts then retry = ts + lim.w - now end
  end
  if retry < 1 then retry = 1 end
  upd = { cutoff = cutoff, remove_at_most = cost + STALE_REMOVED_PER_CALL, at = t, count = cost, expire = expire, live = live }
  return { true, lim.limit, 0, retry, expire - now }, upd
end

-- A refund: the decision, and (remove_newest, delete, expire_us).
function SLIDINGLOG.refund(lim, z, now, tokens)
  local newest = z and z.newest
  local t = now
  if newest and newest > now then t = newest end
  local cutoff = t - lim.w
  local live = zset_count_after(LOG_SET, z, cutoff, lim.limit + 1)
  local remove = tokens
  if remove > live then remove = live end
  if remove < 0 then remove = 0 end
  local left = live - remove
  local newest_left
  if left > 0 then newest_left = log_nth_newest(z, remove) end
  local expire = now
  if newest_left then expire = newest_left + lim.w end
  local remaining = lim.limit - left
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if newest_left then
    reset = expire - now
    if reset < 0 then reset = 0 end
  end
  return { false, lim.limit, remaining, false, reset }, remove, left == 0 and remove > 0, expire
end

function SLIDINGLOG.plan(key, lim, at)
  local now = at.now
  local z = log_open(key, now)
  -- Every expiry written is at most 366 days ahead.
  local cap = now + MAX_PERIOD_US
  local block_end = z and z.blocked
  local in_force = block_end and block_end > now and block_end or nil
  local d, write = nil, nil
  if not at.refund then
    local upd
    if at.force then
      d, upd = SLIDINGLOG.force(lim, z, now, at.n, at.stale_left)
    else
      d, upd = SLIDINGLOG.take(lim, z, now, at.n, at.stale_left)
    end
    if in_force then d = blocked_decision(d, in_force, now) end
    local until_
    if d[1] and at.force then
      -- Recorded past the limit or during a block: behind its block.
      until_ = in_force
      if at.block_us and d[4] then
        until_ = now + at.block_us
        if in_force and in_force > until_ then until_ = in_force end
        d = blocked_decision(d, until_, now)
      end
      if until_ and until_ > upd.expire then upd.expire = until_ end
      upd.block_end = until_
    end
    if not d[1] or at.force then
      if upd then
        upd.log = 'take'
        upd.next = z and z.member and z.member + 1 or 0
        upd.limit = lim.limit
        if upd.expire > cap then upd.expire = cap end
        -- The stale entries it removes, read and checked now, before any
        -- key of the call is written.
        if z and not at.peek then
          upd.stale = z_old_members(LOG_SET, z, upd.remove_at_most, at)
        else
          upd.stale = {}
        end
        write = upd
      end
    elseif at.block_us and z and d[4] then
      local new_until = now + at.block_us
      if in_force and in_force > new_until then new_until = in_force end
      d = blocked_decision(d, new_until, now)
      write = { log = 'block', block_end = new_until, now_ms = at.now_ms, cap = cap }
    end
  else
    local remove, delete, expire
    d, remove, delete, expire = SLIDINGLOG.refund(lim, z, now, at.n)
    if remove > 0 then
      if in_force and in_force > expire then expire = in_force end
      if expire > cap then expire = cap end
      write = { log = 'refund', remove = remove, delete = delete and not in_force, expire = expire }
    end
  end
  return d, write
end

-- Adds `count` (> 1) entries scored `at` (a string) to the log of `key`,
-- as the member loop of SLIDINGLOG.apply would, in two calls: the scores
-- of the next count + live candidate members (`live`: the entries in the
-- window, each a member to skip; at most `modulus` candidates, all
-- distinct), then one ZADD of the first `count` free ones or ones that
-- left the window (moved); with none in the window, only the ZADD of the
-- next `count`. Returns how many it added and the next member; the loop
-- adds any rest (none when `live` is right).
function SLIDINGLOG.add_many(key, at, count, next_member, modulus, cutoff, live)
  if live == 0 then
    -- No entry in the window: every candidate is free or moves.
    local args = ZADD_ARGS
    for i = 1, count do
      local m = (next_member + i - 1) % modulus
      args[2 * i - 1] = at
      args[2 * i] = SMALL_DEC[m] or small_dec(m)
    end
    rcall('ZADD', key, unpack(args, 1, 2 * count))
    return count, next_member + count
  end
  local want = count + live
  if want > modulus then want = modulus end
  local candidates = {}
  for i = 1, want do
    local m = (next_member + i - 1) % modulus
    candidates[i] = SMALL_DEC[m] or small_dec(m)
  end
  local scores = rcall('ZMSCORE', key, unpack(candidates))
  local args, added, used = ZADD_ARGS, 0, 0
  for i = 1, want do
    if added == count then break end
    used = i
    local score = scores[i]
    if not score or tonumber(score) <= cutoff then
      args[2 * added + 1] = at
      args[2 * added + 2] = candidates[i]
      added = added + 1
    end
  end
  if added > 0 then rcall('ZADD', key, unpack(args, 1, 2 * added)) end
  return added, next_member + used
end

function SLIDINGLOG.apply(key, w)
  if w.log == 'take' then
    local removed = w.stale
    if #removed > 0 then rcall('ZREM', key, unpack(removed)) end
    local modulus = 2 * w.limit
    if modulus < 128 then modulus = 128 end
    local at = dec(w.at)
    local added, tries, next_member = 0, 0, w.next
    if w.count > 1 then
      added, next_member = SLIDINGLOG.add_many(key, at, w.count, next_member, modulus, w.cutoff, w.live)
      tries = next_member - w.next
    end
    while added < w.count do
      if tries > modulus + w.count then fail('ERR internal error in the ratelimit module (no free sorted-set member); nothing was written') end
      tries = tries + 1
      local member = fmod(next_member, modulus)
      next_member = next_member + 1
      -- Usually free; one in use by an entry that left the window moves.
      if rcall('ZADD', key, 'NX', at, dec(member)) == 1 then
        added = added + 1
      else
        local score = rcall('ZSCORE', key, dec(member))
        if tonumber(score) <= w.cutoff then
          rcall('ZADD', key, at, dec(member))
          added = added + 1
        end
      end
    end
    rcall('PEXPIREAT', key, dec(ceil_ms(w.expire)))
    -- FORCE's block (a new or extended one) beside the entries.
    if w.block_end then rcall('ZADD', key, dec(w.block_end), 'B') end
  elseif w.log == 'block' then
    apply_log_block(key, w)
  elseif w.delete then
    -- A log may be long: freed lazily, as the module does.
    rcall('UNLINK', key)
  else
    local got = rcall('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'LIMIT', '0', dec(w.remove + 1))
    local removed = {}
    for i = 1, #got do
      if got[i] ~= 'B' and #removed < w.remove then removed[#removed + 1] = got[i] end
    end
    if #removed > 0 then rcall('ZREM', key, unpack(removed)) end
    rcall('PEXPIREAT', key, dec(ceil_ms(w.expire)))
  end
end
return SLIDINGLOG
end

---------------------------------------------------------------------------
-- Concurrency limit with leases (core/src/algorithm/concurrency.rs,
-- src/command/concurrency.rs, src/command/decide/lease.rs): a sorted set
-- with one entry per slot held, scored by its lease's expiry in µs; slot k
-- of the lease `id` is the member "<k>:<id>"; a block is the member "B".

local function need_concurrency()
if CONCURRENCY then return CONCURRENCY end
need_sorted_sets()
CONCURRENCY = { command = 'RL.CONCURRENCY' }

function CONCURRENCY.parse(a, at)
  local limit = integer(a, at, 'limit')
  local lease_us = seconds_as_us(a, at + 1, 'lease')
  if limit < 1 or limit > CONCURRENCY_HARD_MAX then e_range('limit', '>= 1 and <= 100000') end
  if lease_us < 1 or lease_us > MAX_PERIOD_US then e_period('lease') end
  if limit > CONCURRENCY_MAX_LIMIT then
    fail('ERR limit must be <= ' .. dec(CONCURRENCY_MAX_LIMIT) .. ' (the module\'s concurrency-max-limit)')
  end
  return { limit = limit, lease_us = lease_us }
end

-- The operation a word names (any case), or nil.
function CONCURRENCY.op(word)
  if word == nil then return nil end
  local W = upper(word)
  if W == 'ACQUIRE' or W == 'RENEW' or W == 'RELEASE' then return W end
  return nil
end

function CONCURRENCY.check_id(id)
  if id == nil then fail(E_LEASE_OP) end
  if #id < 1 or #id > CONCURRENCY_MAX_ID_LENGTH then
    fail('ERR lease id must be 1 to ' .. dec(CONCURRENCY_MAX_ID_LENGTH) .. ' bytes (the module\'s concurrency-max-id-length)')
  end
end

-- A slot's member "<k>:<id>": k (1 to 100000, no leading zero) and id (1 to
-- 1024 bytes); nil for any other member (one longer than 1031 bytes
-- without a look at its bytes).
local function split_slot(m)
  if #m > 1031 then return nil end
  local colon = find(m, ':', 1, true)
  if colon == nil or colon > 7 or colon == 1 then return nil end
  local digits = sub(m, 1, colon - 1)
  if not find(digits, '^[1-9][0-9]*$') then return nil end
  local k = tonumber(digits)
  if k > CONCURRENCY_HARD_MAX then return nil end
  local id = sub(m, colon + 1)
  if #id < 1 or #id > CONCURRENCY_HARD_MAX_ID then return nil end
  return k, id
end

CONCURRENCY.split_slot = split_slot

-- The lease set as a kind of sorted set (zset_open): its command, its most
-- entries (twice the largest limit, and the block), its member check
-- (is_member, memoized in ok).
local LEASE_SET = {
  cmd = 'RL.CONCURRENCY', max_len = 2 * CONCURRENCY_HARD_MAX + 1,
  -- The live slots it counts are walked and checked, by every operation:
  -- a foreign member scored as a live slot is refused, never counted.
  check_counted = true,
  -- The newest entry's member: true for a slot's, nil if not the module's.
  newest = function(member)
    if split_slot(member) ~= nil then return true end
    return nil
  end,
}

-- A slot's member (at most 6 digits, ':', an id of the default's 128 bytes
-- are memoized) or the block's B.
local is_lease_member = memo_check(LEASE_SET, 135, function(m)
  return m == 'B' or split_slot(m) ~= nil
end)
LEASE_SET.is_member = is_lease_member
CONCURRENCY.set = LEASE_SET

-- The member of a lease's k-th slot, "<k>:<id>", memoized for ids of at
-- most 128 bytes (the default's longest): a lookup instead of a format and
-- a concatenation, for each slot a call probes or writes. Bounded: emptied
-- at 4096 members.
local SLOTS, slots_kept = {}, 0
local function slot_member(k, id)
  local of = SLOTS[id]
  local m = of and of[k]
  if m then return m end
  m = (SMALL_DEC[k] or small_dec(k)) .. ':' .. id
  if #id <= 128 then
    if slots_kept >= 4096 then SLOTS, slots_kept, of = {}, 0, nil end
    if not of then
      of = {}
      SLOTS[id] = of
    end
    of[k] = m
    slots_kept = slots_kept + 1
  end
  return m
end

-- The leases of `key` at `now` for the lease `id` (zset_open): nil for no
-- key, else with {id, held = {expires, slots} or nil, probed}.
local function lease_open(key, id, now)
  local z = zset_open(LEASE_SET, key, now, id, slot_member(1, id))
  if z == nil then return nil end
  -- The lease's slots: 1:id, 2:id, … while present; those sharing the
  -- first one's score are the lease (the first read by zset_open, mostly).
  local probed, same = 0, true
  while probed < CONCURRENCY_MAX_LIMIT do
    local s
    if probed == 0 and z.probe ~= nil then
      s = z.probe
    else
      s = rcall('ZSCORE', key, slot_member(probed + 1, id))
    end
    if not s then break end
    probed = probed + 1
    s = score_us(tonumber(s))
    if z.held == nil then
      z.held = { expires = s, slots = 1 }
    elseif same and z.held.expires == s then
      z.held.slots = z.held.slots + 1
    else
      same = false
    end
  end
  z.probed = probed
  return z
end

-- The expiry of the k-th (0-based) newest slot of another lease than the
-- call's; every member walked checked.
local function lease_nth_newest_other(z, k)
  if z == nil then return nil end
  -- With no slot of its own, the newest other is the newest entry, which
  -- zset_open read and checked.
  if k == 0 and z.probed == 0 then return z.newest end
  local batch = k + 2 + z.probed
  local offset, seen, own = 0, 0, 0
  while true do
    local got = z_top(LEASE_SET, z, offset, batch)
    for i = 1, #got, 2 do
      local m = got[i]
      if m ~= 'B' then
        if not is_lease_member(m) then e_zset_member(LEASE_SET, z) end
        local _, id = split_slot(m)
        if own < z.probed and id == z.id then
          own = own + 1
        else
          if seen == k then return score_us(tonumber(got[i + 1])) end
          seen = seen + 1
        end
      end
    end
    if #got < 2 * batch then return nil end
    offset = offset + batch
  end
end

-- A refusal: `live` slots counted, the reset `reset_now` from now.
local function lease_refuse(lim, live, retry, reset_now)
  local remaining = lim.limit - live
  if remaining < 0 then remaining = 0 end
  return { true, lim.limit, remaining, retry, reset_now }
end

-- An acquisition or renewal of `slots` beside `others` live slots of other
-- leases, the newest of them expiring at `newest_other`: the decision and
-- the update.
local function lease_take(lim, now, others, newest_other, slots)
  local expires = now + lim.lease_us
  local last = expires
  if newest_other and newest_other > last then last = newest_other end
  local remaining = lim.limit - others - slots
  if remaining < 0 then remaining = 0 end
  return { false, lim.limit, remaining, false, last - now },
    { slots = slots, expires = expires, expire_at = last, remove_at_most = slots + EXPIRED_REMOVED_PER_CALL }
end

-- The decision of `op` for the lease, the update (nil: nothing), and the
-- time until every lease held now has expired (an allowed ACQUIRE's: what a
-- refusal by a block reports instead of the lease it does not take).
function CONCURRENCY.decide(lim, z, now, op, n, left)
  local held = z and z.held
  local own_live = 0
  if held and held.expires > now then own_live = held.slots end
  local want = n
  if want > lim.limit then want = lim.limit end
  if op == 'RELEASE' then want = 0 end
  if op == 'RENEW' then want = held and held.slots or 0 end
  local live = zset_count_after(LEASE_SET, z, now, lim.limit + own_live + 1, stale_want(want + EXPIRED_REMOVED_PER_CALL, left))
  local others = live - own_live
  if others < 0 then others = 0 end
  local newest_other = lease_nth_newest_other(z, 0)
  if newest_other and newest_other <= now then newest_other = nil end
  local latest = newest_other
  if own_live > 0 and (latest == nil or held.expires > latest) then latest = held.expires end
  local reset_now = latest and latest - now or 0
  if op == 'ACQUIRE' then
    if n < 1 then n = 1 end
    if n > lim.limit then return lease_refuse(lim, live, false, reset_now) end
    if others + n > lim.limit then
      local retry = reset_now
      local t = lease_nth_newest_other(z, lim.limit - n)
      if t then retry = t - now end
      if retry < 1 then retry = 1 end
      return lease_refuse(lim, live, retry, reset_now)
    end
    local d, u = lease_take(lim, now, others, newest_other, n)
    return d, u, reset_now
  elseif op == 'RENEW' then
    if held and own_live > 0 then return lease_take(lim, now, others, newest_other, held.slots) end
    return lease_refuse(lim, live, false, reset_now)
  end
  local remaining = lim.limit - others
  if remaining < 0 then remaining = 0 end
  local d = { false, lim.limit, remaining, false, newest_other and newest_other - now or 0 }
  if not held then return d end
  return d, { slots = 0, expires = now, expire_at = newest_other, remove_at_most = EXPIRED_REMOVED_PER_CALL }
end

function CONCURRENCY.plan(key, lim, at)
  local now = at.now
  local id = lim.id
  local z = lease_open(key, id, now)
  local cap = now + MAX_PERIOD_US
  local block_end = z and z.blocked
  local op = lim.op
  local d, upd, reset_held = CONCURRENCY.decide(lim, z, now, op, at.n, at.stale_left)
  local write
  if op == 'ACQUIRE' then
    local in_force = block_end and block_end > now and block_end or nil
    if in_force then
      if not d[1] then d[5] = reset_held end
      d = blocked_decision(d, in_force, now)
    end
    if d[1] then
      if at.block_us and z and d[4] then
        local new_until = now + at.block_us
        if in_force and in_force > new_until then new_until = in_force end
        d = blocked_decision(d, new_until, now)
        write = { block_end = new_until, cap = cap }
      end
      return d, write
    end
  end
  if upd == nil or d[1] then return d, nil end
  local in_force
  if block_end and block_end > now then in_force = block_end end
  local latest = upd.expire_at
  if in_force and (latest == nil or in_force > latest) then latest = in_force end
  -- The slots it removes, read and checked now, before any key of the
  -- call is written; a RELEASE that deletes the key checks them too (a
  -- foreign member among them: the module's error, the key kept).
  local removed = {}
  if z and not at.peek then
    removed = z_old_members(LEASE_SET, z, upd.remove_at_most, at)
    for k = upd.slots + 1, z.probed do removed[#removed + 1] = slot_member(k, id) end
  end
  if latest == nil then return d, { lease = true, delete = true } end
  if latest > cap then latest = cap end
  return d, { lease = true, removed = removed, slots = upd.slots, id = id,
    score = dec(upd.expires), expire_ms = ceil_ms(latest) }
end

function CONCURRENCY.apply(key, w)
  if not w.lease then return apply_log_block(key, w) end
  if w.delete then
    rcall('UNLINK', key)
    return
  end
  if #w.removed > 0 then rcall('ZREM', key, unpack(w.removed)) end
  if w.slots > 0 then
    local args, score, id = ZADD_ARGS, w.score, w.id
    for k = 1, w.slots do
      args[2 * k - 1] = score
      args[2 * k] = slot_member(k, id)
    end
    rcall('ZADD', key, unpack(args, 1, 2 * w.slots))
  end
  rcall('PEXPIREAT', key, dec(w.expire_ms))
end
return CONCURRENCY
end

---------------------------------------------------------------------------
-- Commands

-- The five integers of a reply in ms (src/command/mod.rs reply_fields),
-- written over the decision.
local function reply_ms(d)
  d[1] = d[1] and 1 or 0
  d[4] = d[4] and ceil_ms(d[4]) or -1
  d[5] = ceil_ms(d[5])
  return d
end

-- The call's clock, once: NOW, or the server's TIME.
local function clock(o)
  local now = o.now
  if now then
    o.now_ms = floor(now / 1000)
  else
    local t = rcall('TIME')
    local s, us = tonumber(t[1]), tonumber(t[2])
    o.now = s * US_PER_SEC + us
    o.now_ms = s * 1000 + floor(us / 1000)
  end
end

-- One limiter: plan, write unless PEEK (or a _ro twin), reply.
local function run_one(key, lim, o, ro, secs)
  local alg = lim.alg
  if alg == SLIDINGLOG or alg == CONCURRENCY then
    local entries = o.force and log_forced_entries(lim, o.n) or log_entries(lim, o.n)
    if entries > SLIDING_LOG_CALL_BUDGET then e_over_budget(entries) end
    -- What the budget leaves: the most stale entries the call removes.
    o.stale_left = SLIDING_LOG_CALL_BUDGET - entries
  end
  if ro then o.peek = true end
  clock(o)
  local d, write, expire_ms
  if alg.plan then
    d, write = alg.plan(key, lim, o)
  else
    d, write, expire_ms = plan_string(key, alg, lim, o)
  end
  if write ~= nil and not o.peek then
    if alg.apply then alg.apply(key, write) else apply_string(key, write, expire_ms) end
  end
  if secs then return reply_secs5(d) end
  return reply_ms(d)
end

-- The module's arity error, named as the module's command.
local function wrong_arity(command)
  fail('ERR wrong number of arguments for \'' .. command .. '\' command')
end

-- The caller's clock given last, `… NOW unix_µs`: taken off the arguments
-- (the table is the call's own) before anything else is read, so that the
-- rest reads exactly as the module reads its command. Returns the number of
-- arguments left and the clock (nil: none).
local function trailing_now(args)
  local count = #args
  if count >= 2 then
    local w = args[count - 1]
    if #w == 3 and upper(w) == 'NOW' then
      local now = now_option(args, count)
      args[count] = nil
      args[count - 1] = nil
      return count - 2, now
    end
  end
  return count, nil
end

local function e_one_key(fname)
  fail('ERR ' .. fname .. ' takes exactly one key: FCALL ' .. fname .. ' 1 key …')
end

-- Parsed limits by their parameter strings (a limit is a pure function of
-- them): most callers use a few; bounded. `(alg, a, n, at)`: alg's limit
-- from its n parameters at a[at] (at: 1 when not given); one cache per alg.
-- The second function looks a limit up without parsing (nil: not cached),
-- for the fast paths, which raise no error (none in the EVAL form).
local function limit_cache()
  if eval_form then
    -- A cache lives for one call there: none.
    return function(alg, a, n, at)
      local lim = alg.parse(a, at or 1)
      lim.alg = alg
      return lim
    end
  end
  local cache, size = {}, 0
  -- The cache itself, for the fast paths that look into it without a
  -- call: SHARED[1] (a new table when the cache is emptied).
  local SHARED = { cache }
  local function lookup(p1, p2, p3)
    local c1 = cache[p1]
    local c2 = c1 and c1[p2]
    return c2 and c2[p3 or 1]
  end
  return function(alg, a, n, at)
    at = at or 1
    local p1, p2, p3 = a[at], a[at + 1], a[at + 2]
    local c1 = cache[p1]
    local c2 = c1 and c1[p2]
    local lim = c2 and c2[n == 3 and p3 or 1]
    if lim then return lim end
    lim = alg.parse(a, at)
    lim.alg = alg
    if size >= 256 then
      cache, size = {}, 0
      SHARED[1] = cache
    end
    c1 = cache[p1]
    if not c1 then c1 = {}; cache[p1] = c1 end
    c2 = c1[p2]
    if not c2 then c2 = {}; c1[p2] = c2 end
    c2[n == 3 and p3 or 1] = lim
    size = size + 1
    return lim
  end, lookup, SHARED
end

-- The options from args[from] on; none: the defaults.
local function options_or_default(args, count, from, now, own, syntax)
  if count < from then return default_options(now) end
  return options(args, from, own, syntax, now)
end

-- RL.GCRA, RL.TOKENBUCKET, RL.LEAKYBUCKET, RL.SLIDINGLOG
-- (src/command/mod.rs run_kind). args[i] is the module's argv[i + 1].
-- Returns the command and its limits' lookup (limit_cache).
local function kind_command(fname, command, alg, params)
  local cached, lookup = limit_cache()
  return function(keys, args, ro, at_now)
    local key = keys[1]
    if #keys ~= 1 then e_one_key(fname) end
    local count, now = trailing_now(args)
    if at_now then now = at_now end
    if count < params then wrong_arity(command) end
    local lim = cached(alg, args, params)
    local o = options_or_default(args, count, params + 1, now)
    return run_one(key, lim, o, ro)
  end, lookup
end

---------------------------------------------------------------------------
-- Fast paths (docs/functions.md, "Speed"): the common forms of a function
-- (no options, or TOKENS n; with or without NOW last) with a limit already
-- parsed and a state the function wrote itself (or none), answered with
-- the fewest Lua steps and the same replies, writes and expiries as the
-- full path. Anything else (another form, a limit not yet cached, a key of
-- another type, a state not in its plainest encoding, a blocked key, a
-- state too far ahead) returns nil before the clock is read, or goes on
-- into the full path with the clock read (`call(…, now)`): every check
-- and error stays the full path's. A fast path raises no error.

-- Built by the library's first call (need_fast), never by the EVAL form,
-- which builds everything on every call and takes the full path.
-- `call(fname, keys, args, ro, now)`: the full path (defined at the end),
-- handed in rather than captured, which would lengthen every closure's
-- upvalue walk in the EVAL form.
-- Not even made in the EVAL form: a closure made there walks the open
-- upvalues for each name it captures, on every call. Not even in its
-- text: the EVAL form is built without the lines from "fast paths: begin"
-- to "fast paths: end" (docs/functions.md, "Source and forms"), whose
-- code would cost its collector on every call.
local FAST, need_fast
-- fast paths: begin
need_fast = not eval_form and function(call)
if FAST then return FAST end

-- A count in the form `[1-9][0-9]*`, at most 15 digits: what to_int reads
-- as the same value, at least 1; nil for anything else.
local function fast_count(s)
  if #s <= 15 and find(s, '^[1-9]%d*$') then return tonumber(s) end
  return nil
end

-- NOW's value in that form, at most 2^52; nil for anything else.
local function fast_now(s)
  if #s <= 16 and find(s, '^[1-9]%d*$') then
    local v = tonumber(s)
    if v <= TWO52 then return v end
  end
  return nil
end

-- The common forms after `params` parameters: `[TOKENS n] [FORCE] [PEEK]
-- [NOW t]` in that order, upper case, FORCE and PEEK not both (the full
-- path's syntax error). Returns the tokens, the clock (nil: none), whether
-- PEEK was given and whether FORCE was; nil for any other form.
local function fast_form(args, params)
  local count = #args
  local now
  if count >= params + 2 and args[count - 1] == 'NOW' then
    now = fast_now(args[count])
    if not now then return nil end
    count = count - 2
  end
  local i, n = params + 1, 1
  if i < count and args[i] == 'TOKENS' then
    n = fast_count(args[i + 1])
    if not n then return nil end
    i = i + 2
  end
  local force = false
  if i <= count and args[i] == 'FORCE' then
    force = true
    i = i + 1
  end
  local peek = false
  if i == count and args[i] == 'PEEK' then
    if force then return nil end
    peek = true
    i = i + 1
  end
  if i <= count then return nil end
  return n, now, peek, force
end


-- ⌈us / 1000⌉ for 0 <= us < 2^53 (Lua's % is exact there, and no call).
-- Decimal strings of the integers the fast paths write again and again (a
-- window's start, its end in ms, a count), and the reverse: a table lookup
-- instead of string.format and strtod. Bounded: emptied at 4096 entries.
local DEC_OF, NUM_OF, memo_size = {}, {}, 0
local function memo_dec(x)
  local s = format('%d', x)
  if memo_size >= 4096 then DEC_OF, NUM_OF, memo_size = {}, {}, 0 end
  DEC_OF[x] = s
  NUM_OF[s] = x
  memo_size = memo_size + 1
  return s
end
-- The number of a canonical decimal string (TIME's seconds), memoized.
local function memo_num(s)
  local x = tonumber(s)
  if memo_size >= 4096 then DEC_OF, NUM_OF, memo_size = {}, {}, 0 end
  DEC_OF[x] = s
  NUM_OF[s] = x
  memo_size = memo_size + 1
  return x
end

-- The server's clock (µs).
local function server_now()
  local t = rcall('TIME')
  local secs = t[1]
  return (NUM_OF[secs] or memo_num(secs)) * US_PER_SEC + t[2]
end

-- rl_gcra: GCRA.take and plan_string for a TAT in µs.
local function fast_gcra(lookup)
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local n, now, force = 1, nil, false
    local count = #args
    if count == 4 and args[4] == 'FORCE' then
      if ro then return nil end
      force = true
    elseif count ~= 3 then
      local peek
      n, now, peek, force = fast_form(args, 3)
      -- FORCE in rl_gcra_ro: the full path's syntax error.
      if not n or force and ro then return nil end
      if peek then ro = true end
    end
    local lim = lookup(args[1], args[2], args[3])
    if not lim then return nil end
    local key = keys[1]
    -- At most 282 bytes, whatever is stored (issue 41); '' is no key or an
    -- empty string (not a state: the full path's error), as EXISTS tells.
    local stored = rpcall('GETRANGE', key, '0', '281')
    if stored == '' then
      if rcall('EXISTS', key) ~= 0 then return nil end
      stored = false
    end
    if stored and (type(stored) ~= 'string' or #stored > 16 or stored == '' or find(stored, '%D')) then return nil end
    now = now or server_now()
    local ttl = 0
    if stored then
      local tat = tonumber(stored)
      if tat > now + MAX_PERIOD_US then return call('rl_gcra', keys, args, ro, now) end
      if tat > now then ttl = tat - now end
    end
    local limit, t, tau = lim.limit, lim.t, lim.tau
    local x, r
    if n <= limit then
      local new_ttl = ttl + t * n
      if new_ttl <= tau then
        if not ro then
          local tat = now + new_ttl
          r = tat % 1000
          rcall('SET', key, format('%d', tat), 'PXAT', format('%d', (tat - r) / 1000 + (r > 0 and 1 or 0)))
        end
        x = tau - new_ttl
        r = new_ttl % 1000
        return { 0, limit, (x - x % t) / t, -1, (new_ttl - r) / 1000 + (r > 0 and 1 or 0) }
      end
      -- FORCE past the limit: the debt is the full path's.
      if force then return call('rl_gcra', keys, args, ro, now) end
      x = tau - ttl
      local retry = new_ttl - tau
      r = ttl % 1000
      local q = retry % 1000
      return { 1, limit, x > 0 and (x - x % t) / t or 0, (retry - q) / 1000 + (q > 0 and 1 or 0),
        (ttl - r) / 1000 + (r > 0 and 1 or 0) }
    end
    if force then return call('rl_gcra', keys, args, ro, now) end
    x = tau - ttl
    r = ttl % 1000
    return { 1, limit, x > 0 and (x - x % t) / t or 0, -1, (ttl - r) / 1000 + (r > 0 and 1 or 0) }
  end
end

-- rl_tokenbucket and rl_leakybucket: bucket_debt, TOKENBUCKET.take (and
-- LEAKYBUCKET's wait) and plan_string where every product is below 2^53.
local function fast_bucket(lookup, fname, leaky)
  -- ⌊(capacity units − debt) / p⌋ (bucket_remaining); nil when inexact.
  local function remaining(lim, dq, dr)
    local r = lim.r
    local xq, xr = lim.cq - dq, lim.cr - dr
    if xr < 0 then xr = xr + r; xq = xq - 1 end
    if xq < 0 then return 0 end
    local x = xq * r + xr
    if x >= TWO53 then return nil end
    local p = lim.p
    return (x - x % p) / p
  end
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local n, now, peek, force = fast_form(args, 3)
    -- FORCE: the full path (its fast form is rl_gcra's and rl_fixedwindow's).
    if not n or force then return nil end
    if peek then ro = true end
    local lim = lookup(args[1], args[2], args[3])
    if not lim then return nil end
    local key = keys[1]
    -- At most 282 bytes, whatever is stored (issue 41); '' is no key or an
    -- empty string (not a state: the full path's error), as EXISTS tells.
    local stored = rpcall('GETRANGE', key, '0', '281')
    if stored == '' then
      if rcall('EXISTS', key) ~= 0 then return nil end
      stored = false
    end
    local s1, s2
    if stored then
      if type(stored) ~= 'string' then return nil end
      if #stored <= 16 and stored ~= '' and not find(stored, '%D') then
        s1 = stored
      else
        s1, s2 = match(stored, '^(%d+):(%d+)$')
        if not s1 or #s1 > 16 or #s2 > 15 then return nil end
      end
    end
    now = now or server_now()
    local r, capacity = lim.r, lim.capacity
    local dq, dr = 0, 0
    if s1 then
      local full = NUM_OF[s1] or tonumber(s1)
      if full > now + MAX_PERIOD_US then return call(fname, keys, args, ro, now) end
      if full >= now then
        dq = full - now
        if s2 then
          dr = tonumber(s2)
          if dr > r - 1 then dr = r - 1 end
        end
      end
    end
    local p = lim.p
    local np = n * p
    local retry = -1
    if n <= capacity then
      if np >= TWO53 then return call(fname, keys, args, ro, now) end
      local nr = np % r
      local nq = (np - nr) / r + dq
      nr = nr + dr
      if nr >= r then nr = nr - r; nq = nq + 1 end
      local eq, er = nq - lim.cq, nr - lim.cr
      if er < 0 then er = er + r; eq = eq - 1 end
      if eq < 0 or (eq == 0 and er == 0) then
        -- Allowed: the new debt is (nq, nr).
        local x = eq * -r - er
        if x >= TWO53 then return call(fname, keys, args, ro, now) end
        local full_at = now + nq
        local expire = full_at
        if nr > 0 then expire = full_at + 1 end
        local until_full = expire - now
        if not ro then
          if expire > now + MAX_PERIOD_US then expire = now + MAX_PERIOD_US end
          local q = expire % 1000
          rcall('SET', key, nr == 0 and format('%d', full_at) or format('%d:%d', full_at, nr),
            'PXAT', format('%d', (expire - q) / 1000 + (q > 0 and 1 or 0)))
        end
        local q = until_full % 1000
        local wait = -1
        if leaky then
          wait = dq + (dr > 0 and 1 or 0)
          local w = wait % 1000
          wait = (wait - w) / 1000 + (w > 0 and 1 or 0)
        end
        return { 0, capacity, (x - x % p) / p, wait, (until_full - q) / 1000 + (q > 0 and 1 or 0) }
      end
      retry = eq + (er > 0 and 1 or 0)
      local q = retry % 1000
      retry = (retry - q) / 1000 + (q > 0 and 1 or 0)
    end
    local left = remaining(lim, dq, dr)
    if left == nil then return call(fname, keys, args, ro, now) end
    local debt = dq + (dr > 0 and 1 or 0)
    local q = debt % 1000
    return { 1, capacity, left, retry, (debt - q) / 1000 + (q > 0 and 1 or 0) }
  end
end

-- rl_slidinglog: zset_open, zset_count_after, SLIDINGLOG.take and .apply
-- for a log whose newest entry is not ahead of now, without a block in
-- force and with at most limit + 1 entries left in the window's past,
-- answered with the same sorted-set commands; a refusal with the log full
-- (even counting a block) reads the set three times: its length, its old
-- entries, its newest limit − n + 2 (the n-th newest's score: the retry).
-- Every member read is checked; one the module would not have written
-- sends the call to the full path (which errors where the module does).
local function fast_log(lookup)
  local LOG, MEMBER_OK, members = SLIDINGLOG, {}, 0
  local SET = LOG.set
  -- The full path, handed this path's read of the old entries and of the
  -- newest ones with their scores (`top`, by rank from the newest: neither
  -- read again by zset_open, zset_count_after, log_nth_newest; a member of
  -- another client's may be long).
  local function full(keys, args, ro, now, old, cutoff, fetch, top)
    if old then SET.read = { key = keys[1], old_max = cutoff, fetch = fetch, old = old, top = top } end
    local reply = call('rl_slidinglog', keys, args, ro, now)
    SET.read = nil
    return reply
  end
  local function is_member(m)
    local ok = MEMBER_OK[m]
    if ok == nil then
      ok = LOG.is_member(m)
      if members >= 4096 then MEMBER_OK, members = {}, 0 end
      MEMBER_OK[m] = ok
      members = members + 1
    end
    return ok
  end
  -- The newest entry (member, score string) is one the module wrote: its
  -- member's integer and score (µs); nil if not.
  local function newest_entry(m, score)
    if m == 'B' or not is_member(m) then return nil end
    local id = NUM_OF[m] or tonumber(m)
    local v = tonumber(score)
    if not (v and v == v and v > -INF and v < INF and v == floor(v) and v >= 1e14) then return nil end
    return id, v
  end
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local n, now, peek, force = fast_form(args, 2)
    -- FORCE: the full path (its fast form is rl_gcra's and rl_fixedwindow's).
    if not n or force then return nil end
    if peek then ro = true end
    local lim = lookup(args[1], args[2])
    if not lim then return nil end
    local key = keys[1]
    local len = rpcall('ZCARD', key)
    if type(len) ~= 'number' or len > 2 * SLIDING_LOG_HARD_MAX + 1 then return nil end
    now = now or server_now()
    local limit, w = lim.limit, lim.w
    local cutoff = now - w
    local newest, member, blocked, live = nil, nil, nil, 0
    local old, fetch, top
    if len > 0 then
      -- zset_count_after's walk of the old entries, with the stale entries
      -- an allowed call removes (the full path fetches as many).
      local removable = n < limit and n or limit
      fetch = removable + STALE_REMOVED_PER_CALL
      if fetch < limit + 2 then fetch = limit + 2 end
      old = rcall('ZRANGEBYSCORE', key, '-inf', format('%d', cutoff), 'LIMIT', '0', DEC_OF[fetch] or memo_dec(fetch))
      local older = #old
      if older > limit + 1 then return full(keys, args, ro, now, old, cutoff, fetch) end
      local old_block = false
      for i = 1, older do
        local m = old[i]
        if m == 'B' then old_block = true elseif not is_member(m) then return full(keys, args, ro, now, old, cutoff, fetch) end
      end
      -- Entries after the cutoff, a block there among them or not.
      local upper = len - older
      if n <= limit and upper + n > limit then
        -- Refused unless a block is among them: the newest limit − n + 2.
        local k = limit - n
        top = rcall('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', '0', DEC_OF[k + 2] or memo_dec(k + 2))
        local seen, nth, lowest = 0, nil, nil
        for i = 1, #top, 2 do
          local m = top[i]
          if m == 'B' then
            blocked = score_us(tonumber(top[i + 1]))
          else
            if not newest then
              member, newest = newest_entry(m, top[i + 1])
              if not member then return full(keys, args, ro, now, old, cutoff, fetch, top) end
            elseif not is_member(m) then
              return full(keys, args, ro, now, old, cutoff, fetch, top)
            end
            if seen == k then nth = score_us(tonumber(top[i + 1])) end
            seen = seen + 1
          end
          lowest = top[i + 1]
        end
        if newest == nil or newest > now or (blocked and blocked > now) then
          return full(keys, args, ro, now, old, cutoff, fetch, top)
        end
        -- The block: read (its score), among the old entries, absent (the
        -- whole set read), or not read: then at or before the lowest entry
        -- read, so past when that is, and not counted when that is old;
        -- else only the count's cap decides (the reply is the same).
        local after
        if blocked then
          after = blocked > cutoff
        elseif old_block or #top < 2 * (k + 2) then
          after = false
        else
          local low = tonumber(lowest)
          if low <= cutoff then
            after = false
          elseif upper - 1 >= limit and low <= now then
            after = true
          else
            return full(keys, args, ro, now, old, cutoff, fetch, top)
          end
        end
        live = after and upper - 1 or upper
        if live > limit + 1 then live = limit + 1 end
        if live + n <= limit then return full(keys, args, ro, now, old, cutoff, fetch, top) end
        local reset = newest + w - now
        local retry = reset
        if nth then retry = nth + w - now end
        if retry < 1 then retry = 1 end
        local remaining = limit - live
        if remaining < 0 then remaining = 0 end
        local q, r = retry % 1000, reset % 1000
        return { 1, limit, remaining, (retry - q) / 1000 + (q > 0 and 1 or 0), (reset - r) / 1000 + (r > 0 and 1 or 0) }
      end
      -- zset_open: the newest entry, the next one past the block.
      top = rcall('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
      local m, score = top[1], top[2]
      if m == 'B' then
        blocked = score_us(tonumber(score))
        local past = rcall('ZREVRANGEBYSCORE', key, '+inf', '-inf', 'WITHSCORES', 'LIMIT', '1', '1')
        m, score = past[1], past[2]
        top[3], top[4] = m, score
      end
      if m then
        member, newest = newest_entry(m, score)
        if not member then return full(keys, args, ro, now, old, cutoff, fetch, top) end
      end
      if not blocked and not old_block then
        local b = rcall('ZSCORE', key, 'B')
        if b then blocked = score_us(tonumber(b)) end
      end
      if (newest and newest > now) or (blocked and blocked > now) then
        return full(keys, args, ro, now, old, cutoff, fetch, top)
      end
      live = upper
      if blocked and blocked > cutoff then live = live - 1 end
      if live < 0 then live = 0 end
      if live > limit + 1 then live = limit + 1 end
    end
    local reset = 0
    if newest and live > 0 then reset = newest + w - now end
    local remaining = limit - live
    if remaining < 0 then remaining = 0 end
    if n > limit or live + n > limit then
      if n <= limit then return full(keys, args, ro, now, old, cutoff, fetch, top) end
      local r = reset % 1000
      return { 1, limit, remaining, -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
    end
    if not ro then
      -- SLIDINGLOG.apply: the stale entries, then n entries at now.
      if old and #old > 0 then
        local stale = old
        if #old > n + STALE_REMOVED_PER_CALL then stale = { unpack(old, 1, n + STALE_REMOVED_PER_CALL) } end
        rcall('ZREM', key, unpack(stale))
      end
      local modulus = 2 * limit
      if modulus < 128 then modulus = 128 end
      local at = format('%d', now)
      local added, tries, next_member = 0, 0, member and member + 1 or 0
      if n > 1 then
        local first = next_member
        added, next_member = LOG.add_many(key, at, n, next_member, modulus, cutoff, live)
        tries = next_member - first
      end
      while added < n do
        if tries > modulus + n then return call('rl_slidinglog', keys, args, ro, now) end
        tries = tries + 1
        local m = DEC_OF[next_member % modulus]
        m = m or memo_dec(next_member % modulus)
        next_member = next_member + 1
        if rcall('ZADD', key, 'NX', at, m) == 1 then
          added = added + 1
        else
          local score = rcall('ZSCORE', key, m)
          if tonumber(score) <= cutoff then
            rcall('ZADD', key, at, m)
            added = added + 1
          end
        end
      end
      local expire = now + w
      local q = expire % 1000
      rcall('PEXPIREAT', key, format('%d', (expire - q) / 1000 + (q > 0 and 1 or 0)))
    end
    local q = w % 1000
    return { 0, limit, limit - live - n, -1, (w - q) / 1000 + (q > 0 and 1 or 0) }
  end
end

-- cl_throttle: its common forms (an optional quantity of at least 1, NOW
-- last) on a TAT in ns (what the library and the module write today):
-- CELL.take and plan_string.
local function fast_cell(lookup)
  -- cell_remaining of a TAT (a_us, a_ns) from now.
  local function remaining(lim, a_us, a_ns)
    local t_us, t_ns = lim.t_us, lim.t_ns
    local nus, nns = lim.tau_us - a_us, lim.tau_ns - a_ns
    if nns < 0 then nns = nns + 1000; nus = nus - 1 end
    -- next <= −T: nothing left.
    local mus, mns = -t_us, 0
    if t_ns > 0 then mus, mns = -t_us - 1, 1000 - t_ns end
    if not (nus > mus or (nus == mus and nns > mns)) then return 0 end
    if nus < 0 and nns > 0 then nus = nus + 1 end
    local c = nus / t_us
    if c < 0 then c = -floor(-c) else c = floor(c) end
    if c < 0 then return 0 end
    if c > lim.limit then return lim.limit end
    return c
  end
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local count = #args
    local now
    if count >= 5 and args[count - 1] == 'NOW' then
      now = fast_now(args[count])
      if not now then return nil end
      count = count - 2
    end
    local n = 1
    if count == 4 then
      n = fast_count(args[4])
      if not n then return nil end
    elseif count ~= 3 then
      return nil
    end
    local lim = lookup(args[1], args[2], args[3])
    if not lim then return nil end
    local key = keys[1]
    -- At most 282 bytes, whatever is stored (issue 41); '' is no key or an
    -- empty string (not a state: the full path's error), as EXISTS tells.
    local stored = rpcall('GETRANGE', key, '0', '281')
    if stored == '' then
      if rcall('EXISTS', key) ~= 0 then return nil end
      stored = false
    end
    local sus, sns
    if stored then
      if type(stored) ~= 'string' then return nil end
      local len = #stored
      if (len ~= 18 and len ~= 19) or not find(stored, '^[1-9]%d*$') or (len == 19 and stored > I64_MAX) then
        return nil
      end
      sus, sns = tonumber(sub(stored, 1, -4)), tonumber(sub(stored, -3))
    end
    now = now or server_now()
    if sus and sus > now + MAX_PERIOD_US then return call('cl_throttle', keys, args, ro, now) end
    local t_us, t_ns, limit, tau_us, tau_ns = lim.t_us, lim.t_ns, lim.limit, lim.tau_us, lim.tau_ns
    if n >= 9e12 then return call('cl_throttle', keys, args, ro, now) end
    -- The TAT from now (≥ 0), as (µs, ns); now has no ns.
    local ttl_us, ttl_ns = 0, 0
    if sus and (sus > now or (sus == now and sns > 0)) then ttl_us, ttl_ns = sus - now, sns end
    local r = ttl_us % 1000000
    local ttl_secs = (ttl_us - r) / 1000000 + (r >= 1000 and 1 or 0)
    if n > limit then return { 1, limit, remaining(lim, ttl_us, ttl_ns), -1, ttl_secs } end
    local x = t_ns * n
    local ins = x % 1000
    local nus, nns = ttl_us + now + t_us * n + (x - ins) / 1000, ttl_ns + ins
    if nns >= 1000 then nns = nns - 1000; nus = nus + 1 end
    local lus = nus - now
    if lus > tau_us or (lus == tau_us and nns > tau_ns) then
      local rus = lus - tau_us - (nns < tau_ns and 1 or 0)
      local left = remaining(lim, ttl_us, ttl_ns)
      if left > n - 1 then left = n - 1 end
      r = rus % 1000000
      local retry = (rus - r) / 1000000 + (r >= 1000 and 1 or 0)
      if retry < 1 then retry = 1 end
      return { 1, limit, left, retry, ttl_secs }
    end
    if not ro then
      local expire = nus + (nns > 0 and 1 or 0)
      if expire > now + MAX_PERIOD_US then expire = now + MAX_PERIOD_US end
      local q = expire % 1000
      rcall('SET', key, nus >= 1e14 and format('%d%03d', nus, nns) or format('%d', nus + (nns > 0 and 1 or 0)),
        'PXAT', format('%d', (expire - q) / 1000 + (q > 0 and 1 or 0)))
    end
    r = lus % 1000000
    return { 0, limit, remaining(lim, lus, nns), -1, (lus - r) / 1000000 + (r >= 1000 and 1 or 0) }
  end
end

-- rl_fixedwindow, with or without ALIGN FIRST right after the parameters:
-- fixed_counted, FIXEDWINDOW.take and plan_string.
local function fast_fixed(lookup)
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local first = args[3] == 'ALIGN' and args[4] == 'FIRST'
    local n, now, peek, force
    if #args == 3 and args[3] == 'FORCE' then
      n, peek, force = 1, false, true
    else
      n, now, peek, force = fast_form(args, first and 4 or 2)
    end
    -- FORCE in rl_fixedwindow_ro: the full path's syntax error.
    if not n or force and ro then return nil end
    if peek then ro = true end
    local lim = lookup(args[1], args[2])
    if lim and first then lim = lim.first_variant end
    -- A calendar window (DAY … YEAR) takes the full path.
    if not lim or lim.unit then return nil end
    local key = keys[1]
    -- At most 282 bytes, whatever is stored (issue 41); '' is no key or an
    -- empty string (not a state: the full path's error), as EXISTS tells.
    local stored = rpcall('GETRANGE', key, '0', '281')
    if stored == '' then
      if rcall('EXISTS', key) ~= 0 then return nil end
      stored = false
    end
    local s1, s2
    if stored then
      if type(stored) ~= 'string' or #stored > 34 then return nil end
      s1, s2 = match(stored, first and '^F(%d+):(%d+)$' or '^(%d+):(%d+)$')
      if not s1 or #s1 > 16 or #s2 > 15 then return nil end
    end
    now = now or server_now()
    local w, limit = lim.w, lim.limit
    local start, count
    if s1 then
      start, count = NUM_OF[s1] or tonumber(s1), NUM_OF[s2] or tonumber(s2)
      if start > now + MAX_PERIOD_US then return call('rl_fixedwindow', keys, args, ro, now) end
      if start > now then
        -- a window ahead (a clock that stepped back): counted as it is
      elseif first then
        if now >= start + w then start, count = now, 0 end
      else
        local current = now - now % w
        if start ~= current then start, count = current, 0 end
      end
    else
      start, count = first and now or now - now % w, 0
    end
    local to_end = start + w - now
    local r = to_end % 1000
    local reset = (to_end - r) / 1000 + (r > 0 and 1 or 0)
    local new_count = count + n
    if n <= limit and new_count <= limit then
      if not ro then
        local finish = start + w
        if finish > now + MAX_PERIOD_US then finish = now + MAX_PERIOD_US end
        r = finish % 1000
        finish = (finish - r) / 1000 + (r > 0 and 1 or 0)
        local value
        if first then
          value = 'F' .. (DEC_OF[start] or memo_dec(start)) .. ':' .. (DEC_OF[new_count] or memo_dec(new_count))
        else
          value = (DEC_OF[start] or memo_dec(start)) .. ':' .. (DEC_OF[new_count] or memo_dec(new_count))
        end
        rcall('SET', key, value, 'PXAT', DEC_OF[finish] or memo_dec(finish))
      end
      return { 0, limit, limit - new_count, -1, reset }
    end
    -- FORCE past the limit: the debt is the full path's.
    if force then return call('rl_fixedwindow', keys, args, ro, now) end
    local remaining = limit - count
    if remaining < 0 then remaining = 0 end
    if count == 0 then reset = 0 end
    return { 1, limit, remaining, n <= limit and reset or -1, reset }
  end
end

-- rl_slidingwindow without BUCKETS: sliding_view and SLIDINGWINDOW.take
-- where the weighted count is a product below 2^53, when allowed or when
-- TOKENS is above the limit (a refusal's retry: the full path).
local function fast_sliding(lookup)
  return function(keys, args, ro)
    if #keys ~= 1 then return nil end
    local n, now, peek, force = fast_form(args, 2)
    -- FORCE: the full path (its fast form is rl_gcra's and rl_fixedwindow's).
    if not n or force then return nil end
    if peek then ro = true end
    local lim = lookup(args[1], args[2])
    if not lim or lim.limit > MAX_EXACT then return nil end
    local key = keys[1]
    -- At most 282 bytes, whatever is stored (issue 41); '' is no key or an
    -- empty string (not a state: the full path's error), as EXISTS tells.
    local stored = rpcall('GETRANGE', key, '0', '281')
    if stored == '' then
      if rcall('EXISTS', key) ~= 0 then return nil end
      stored = false
    end
    local s1, s2, s3
    if stored then
      if type(stored) ~= 'string' or #stored > 50 then return nil end
      s1, s2, s3 = match(stored, '^(%d+):(%d+):(%d+)$')
      if not s1 or #s1 > 16 or #s2 > 15 or #s3 > 15 then return nil end
    end
    now = now or server_now()
    local w, limit = lim.w, lim.limit
    local t = now
    local previous, current = 0, 0
    local start
    if s1 then
      local s_start = tonumber(s1)
      if s_start > now + MAX_PERIOD_US then return call('rl_slidingwindow', keys, args, ro, now) end
      if s_start > now then t = s_start end
      start = t - t % w
      if s_start == start then
        previous, current = tonumber(s2), tonumber(s3)
      elseif s_start == start - w then
        previous = tonumber(s3)
      end
    else
      start = t - t % w
    end
    local p = previous * (w - (t - start))
    if p >= TWO53 then return call('rl_slidingwindow', keys, args, ro, now) end
    local pr = p % w
    local pc = (p - pr) / w + (pr > 0 and 1 or 0)
    local remaining
    if n > limit then
      remaining = limit - current - pc
      local reset = 0
      if current > 0 then reset = start + 2 * w - now elseif previous > 0 then reset = start + w - now end
      local r = reset % 1000
      return { 1, limit, remaining > 0 and remaining or 0, -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
    end
    local new_current = current + n
    if pc > limit - new_current then return call('rl_slidingwindow', keys, args, ro, now) end
    local expire = start + 2 * w
    if not ro then
      local cap = now + 2 * MAX_PERIOD_US
      local e = expire > cap and cap or expire
      local r = e % 1000
      rcall('SET', key, format('%d:%d:%d', start, previous, new_current),
        'PXAT', format('%d', (e - r) / 1000 + (r > 0 and 1 or 0)))
    end
    local reset = expire - now
    local r = reset % 1000
    return { 0, limit, limit - new_current - pc, -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
  end
end

-- rl_all: its common forms over GCRA and FIXEDWINDOW limits (in seconds),
-- `[TOKENS n] [PEEK] [WITHLIMITS]` after the limits, in that order, upper
-- case, `NOW t` last or not; each limit already cached (`KINDS`, the full
-- path's caches) and each key holding its plainest state or none: each
-- limit decided as fast_gcra and fast_fixed decide (GCRA.take,
-- FIXEDWINDOW.take, plan_string), in µs, the binding limit found as
-- `binding` finds it, every key written (SET … PXAT, in the keys' order)
-- only when none refuses. Anything else returns nil before the clock is
-- read, or goes on into the full path with the clock read.
local function fast_all(KINDS)
  local concat = table.concat
  -- The limits' caches (limit_cache), looked into without a call.
  local GCRA_CACHE, FIXED_CACHE = KINDS.GCRA[5], KINDS.FIXEDWINDOW[5]
  -- Each form read once (`form`), by its arguments before NOW joined with
  -- spaces: its limits by position (form[i]: a fixed window's has `w`, a
  -- GCRA's not), how many arguments (count) and keys (nkeys) it has, its
  -- tokens (n), whether it has PEEK and WITHLIMITS. Kept only when no
  -- argument holds a space: a call whose arguments join to the same text
  -- and are as many then has the same arguments (their count − 1
  -- separators are all the spaces of the text). A limit is a pure function
  -- of its parameters: a form outlives the caches' emptying. Bounded.
  local FORMS, forms = {}, 0
  -- Each key's value and expiry (ms, decimal) to write, by position:
  -- reused by every call (no call runs inside another), which spares
  -- tables.
  local VALUE, EXPIRE = {}, {}
  -- A fixed window's stored state `<start>:<count>` read before: its two
  -- numbers (false: not that form), bounded. Keys counted in the same
  -- windows hold the same few states.
  local W_START, W_COUNT, states = {}, {}, 0
  -- The expiry (ms, decimal: ⌈end / 1000⌉) of a window ending at `end`
  -- (µs), bounded: the few windows in use.
  local END_MS, ends = {}, 0
  local function end_ms(e)
    e = e + 999
    local s = format('%d', (e - e % 1000) / 1000)
    if ends >= 4096 then END_MS, ends = {}, 0 end
    END_MS[e - 999] = s
    ends = ends + 1
    return s
  end

  -- The form of `count` arguments for `nkeys` keys (nil: not a common one,
  -- or a limit not cached).
  local function form_of(args, count, nkeys)
    if nkeys < 1 or nkeys > 64 then return nil end
    local form = { nkeys = nkeys, count = count, n = 1, peek = false, withlimits = false }
    local at = 1
    for i = 1, nkeys do
      local W, lim = args[at], nil
      if W == 'GCRA' then
        if at + 3 > count then return nil end
        lim = GCRA_CACHE[1][args[at + 1]]
        lim = lim and lim[args[at + 2]]
        lim = lim and lim[args[at + 3]]
        if not lim then return nil end
        at = at + 4
      elseif W == 'FIXEDWINDOW' then
        if at + 2 > count then return nil end
        lim = FIXED_CACHE[1][args[at + 1]]
        lim = lim and lim[args[at + 2]]
        lim = lim and lim[1]
        -- A calendar window (DAY … YEAR) takes the full path.
        if not lim or lim.unit or lim.limit > MAX_EXACT then return nil end
        at = at + 3
      else
        return nil
      end
      form[i] = lim
    end
    if at < count and args[at] == 'TOKENS' then
      local n = fast_count(args[at + 1])
      if not n then return nil end
      form.n = n
      at = at + 2
    end
    if at <= count and args[at] == 'PEEK' then
      form.peek = true
      at = at + 1
    end
    if at <= count and args[at] == 'WITHLIMITS' then
      form.withlimits = true
      at = at + 1
    end
    if at <= count then return nil end
    for i = 1, count do
      if find(args[i], ' ', 1, true) then return form end
    end
    if forms >= 256 then FORMS, forms = {}, 0 end
    FORMS[concat(args, ' ', 1, count)] = form
    forms = forms + 1
    return form
  end

  -- The start of the fixed window stored as `stored` (false: not the
  -- plainest form), its count in W_COUNT[stored].
  local function window_state(stored)
    if type(stored) ~= 'string' then return false end
    local start, c = false, nil
    local s1, s2
    if #stored <= 34 then s1, s2 = match(stored, '^(%d+):(%d+)$') end
    if s1 and #s1 <= 16 and #s2 <= 15 then start, c = tonumber(s1), tonumber(s2) end
    if states >= 4096 then W_START, W_COUNT, states = {}, {}, 0 end
    W_START[stored], W_COUNT[stored] = start, c
    states = states + 1
    return start
  end

  return function(keys, args, ro)
    local count = #args
    local now
    -- (args[0] and args[-1] are nil)
    if args[count - 1] == 'NOW' then
      now = fast_now(args[count])
      if not now then return nil end
      count = count - 2
    end
    local nkeys = #keys
    local form = FORMS[concat(args, ' ', 1, count)]
    if not form or form.count ~= count or form.nkeys ~= nkeys then
      form = form_of(args, count, nkeys)
      if not form then return nil end
    end
    if nkeys == 2 then
      if keys[1] == keys[2] then return nil end
    elseif nkeys > 2 then
      local seen = {}
      for i = 1, nkeys do
        local key = keys[i]
        if seen[key] then return nil end
        seen[key] = true
      end
    end
    if not now then
      local t = rcall('TIME')
      local secs = t[1]
      now = (NUM_OF[secs] or memo_num(secs)) * 1000000 + t[2]
    end
    local horizon = now + MAX_PERIOD_US
    local n, peek = form.n, ro or form.peek
    local reply = form.withlimits and {}
    -- Each limit decided in turn (GCRA.take, FIXEDWINDOW.take in µs), the
    -- binding one kept as `binding` finds it: when limited, the refusing
    -- limit with the longest retry (none counts as longest); when allowed,
    -- the fewest remaining (below any limit's: the first counts); the
    -- first on ties.
    local best, b_limited, b_remaining = 0, 0, TWO53
    local b_retry, b_reset
    for i = 1, nkeys do
      local key, lim = keys[i], form[i]
      -- At most 282 bytes, whatever is stored (issue 41); '' is no key or
      -- an empty string (not a state: the full path's error), as EXISTS
      -- tells; an error reply (a key of another type) is a table.
      local stored = rpcall('GETRANGE', key, '0', '281')
      if stored == '' then
        if rcall('EXISTS', key) ~= 0 then return call('rl_all', keys, args, ro, now) end
        stored = false
      end
      local limit, w = lim.limit, lim.w
      local limited, retry, remaining, reset
      if w then
        local start, c
        if stored then
          start = W_START[stored]
          if start == nil then start = window_state(stored) end
          if not start or start > horizon then return call('rl_all', keys, args, ro, now) end
          c = W_COUNT[stored]
          if start <= now then
            local current = now - now % w
            if start ~= current then
              start = current
              c = 0
            end
          end
        else
          start = now - now % w
          c = 0
        end
        local to_end = start + w - now
        local new_count = c + n
        -- (c >= 0: within the limit, n is too)
        if new_count <= limit then
          remaining = limit - new_count
          reset = to_end
          if not peek then
            local finish = start + w
            if finish > horizon then finish = horizon end
            VALUE[i] = (DEC_OF[start] or memo_dec(start)) .. ':' .. (DEC_OF[new_count] or memo_dec(new_count))
            EXPIRE[i] = END_MS[finish] or end_ms(finish)
          end
        else
          limited = true
          remaining = limit - c
          if remaining < 0 then remaining = 0 end
          retry = n <= limit and to_end
          reset = c > 0 and to_end or 0
        end
      else
        local ttl = 0
        if stored then
          if type(stored) ~= 'string' or #stored > 16 or find(stored, '%D') then
            return call('rl_all', keys, args, ro, now)
          end
          local tat = tonumber(stored)
          if tat > horizon then return call('rl_all', keys, args, ro, now) end
          if tat > now then ttl = tat - now end
        end
        local t, tau = lim.t, lim.tau
        local new_ttl = ttl + t * n
        -- (ttl >= 0: within tau = t × limit, n is within the limit)
        if new_ttl <= tau then
          local x = tau - new_ttl
          remaining = (x - x % t) / t
          reset = new_ttl
          if not peek then
            local tat = now + new_ttl
            VALUE[i] = format('%d', tat)
            -- ⌈tat / 1000⌉ (exact below 2^53)
            tat = tat + 999
            EXPIRE[i] = format('%d', (tat - tat % 1000) / 1000)
          end
        else
          limited = true
          local x = tau - ttl
          remaining = x > 0 and (x - x % t) / t or 0
          retry = n <= limit and new_ttl - tau
          reset = ttl
        end
      end
      -- (b_limited: 1 when limited, else 0; b_retry: false for none)
      if limited then
        if b_limited == 0 or (b_retry ~= false and (not retry or retry > b_retry)) then
          best = i
          b_limited = 1
          b_remaining = remaining
          b_retry = retry
          b_reset = reset
        end
      elseif b_limited == 0 and remaining < b_remaining then
        best = i
        b_remaining = remaining
        b_reset = reset
      end
      if reply then
        local j = 1 + 5 * i
        local q, r = retry and retry % 1000, reset % 1000
        reply[j + 1], reply[j + 2], reply[j + 3] = limited and 1 or 0, limit, remaining
        reply[j + 4] = retry and (retry - q) / 1000 + (q > 0 and 1 or 0) or -1
        reply[j + 5] = (reset - r) / 1000 + (r > 0 and 1 or 0)
      end
    end
    if b_limited == 0 and not peek then
      for i = 1, nkeys do rcall('SET', keys[i], VALUE[i], 'PXAT', EXPIRE[i]) end
    end
    b_reset = b_reset + 999
    b_reset = (b_reset - b_reset % 1000) / 1000
    if b_retry then
      b_retry = b_retry + 999
      b_retry = (b_retry - b_retry % 1000) / 1000
    else
      b_retry = -1
    end
    if not reply then
      return { b_limited, form[best].limit, b_remaining, b_retry, b_reset, best }
    end
    reply[1], reply[2], reply[3], reply[4], reply[5], reply[6] =
      b_limited, form[best].limit, b_remaining, b_retry, b_reset, best
    return reply
  end
end

-- rl_concurrency: `ACQUIRE id [TOKENS n] [PEEK]`, `RENEW id [PEEK]`,
-- `RELEASE id [PEEK]` (upper case, in that order), `NOW t` last or not,
-- n at most the limit, on a lease set of at most 2 × limit + 2 entries,
-- read whole by one ZRANGE: lease_open, CONCURRENCY.decide, .plan and
-- .apply over what it read, with the same writes (ZREM of the expired
-- entries and of the lease's slots it gives back, ZADD of its slots,
-- PEXPIREAT; or UNLINK). Every entry must be one the module writes (a
-- lease's slot or the block's B, an integer score from 10^14 to the
-- horizon), the lease's own slots 1:id … p:id sharing one expiry, and no
-- block in force; anything else goes on into the full path with the clock
-- and what this one read (its walks read again none of it: it then
-- answers or errors as the module does).
local function fast_lease(lookup, split_slot)
  -- split_slot's answers by member: SLOT_ID the lease id (false: the
  -- block's B or a member the module does not write), SLOT_K the slot's k;
  -- FIRST the member of each lease id's first slot (false: an id the
  -- module refuses). Bounded.
  local SLOT_K, SLOT_ID, FIRST, known = {}, {}, {}, 0
  -- The other leases' expiries (ascending) and the expired entries'
  -- members, reused by every call (no call runs inside another).
  local OTHER, OLD = {}, {}
  -- The full path, handed this path's read of the set (its first entries
  -- by rank, with their scores; zset_open, zset_count_after and the walks
  -- read again none of those: a member of another client's may be long).
  local SET = CONCURRENCY.set
  local function full(keys, args, ro, now, got)
    SET.read = { key = keys[1], asc = got }
    local reply = call('rl_concurrency', keys, args, ro, now)
    SET.read = nil
    return reply
  end
  -- A refusal: `live` slots counted (the full path's capped count), the
  -- retry (false: none; true: the reset), the reset: when every lease
  -- live now has expired.
  local function refused(limit, live, retry, now, newest, own_live, expires)
    local latest = newest and newest > now and newest or nil
    if own_live > 0 and (latest == nil or expires > latest) then latest = expires end
    local reset = latest and latest - now or 0
    if retry == true then retry = reset end
    if retry and retry < 1 then retry = 1 end
    local remaining = limit - live
    if remaining < 0 then remaining = 0 end
    local r = reset % 1000
    if retry then
      local q = retry % 1000
      retry = (retry - q) / 1000 + (q > 0 and 1 or 0)
    end
    return { 1, limit, remaining, retry or -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
  end
  return function(keys, args, ro)
    local count, n, now = #args, 1, nil
    local op, id = args[3], args[4]
    if count ~= 4 then
      if count < 4 then return nil end
      if count >= 6 and args[count - 1] == 'NOW' then
        now = fast_now(args[count])
        if not now then return nil end
        count = count - 2
      end
      local i = 5
      if op == 'ACQUIRE' and count >= 6 and args[5] == 'TOKENS' then
        n = fast_count(args[6])
        if not n then return nil end
        i = 7
      end
      if i == count and args[i] == 'PEEK' then
        ro = true
        i = i + 1
      end
      if i <= count then return nil end
    end
    if #keys ~= 1 or (op ~= 'ACQUIRE' and op ~= 'RENEW' and op ~= 'RELEASE') then return nil end
    local first = FIRST[id]
    if first == nil then
      local len = #id
      first = len >= 1 and len <= CONCURRENCY_MAX_ID_LENGTH and '1:' .. id
      if known >= 4096 then SLOT_K, SLOT_ID, FIRST, known = {}, {}, {}, 0 end
      FIRST[id] = first
      known = known + 1
    end
    if not first then return nil end
    local lim = lookup(args[1], args[2])
    if not lim then return nil end
    local limit = lim.limit
    if n > limit then return nil end
    -- Kept beside the limit: the ZRANGE's last index, the most strings
    -- the read may return, the lease's length in whole ms (rounded up).
    local stop = lim.fast_stop
    if not stop then
      stop = format('%d', limit + limit + 2)
      lim.fast_most = 4 * limit + 4
      local r = lim.lease_us % 1000
      lim.fast_lease_ms = (lim.lease_us - r) / 1000 + (r > 0 and 1 or 0)
      lim.fast_stop = stop
    end
    local key = keys[1]
    local got = rpcall('ZRANGE', key, '0', stop, 'WITHSCORES')
    if got.err then return nil end
    -- Longer than any lease set this path answers: what it read handed on.
    if #got > lim.fast_most then return full(keys, args, ro, now, got) end
    if not now then
      local t = rcall('TIME')
      local secs = t[1]
      now = (NUM_OF[secs] or memo_num(secs)) * US_PER_SEC + t[2]
    end
    local horizon = now + MAX_PERIOD_US
    -- The walk: the lease's slots (p, their expiry, the highest k), the
    -- live entries, the others' expiries, the expired entries.
    local p, expires, top_k, live, others_n, old_n = 0, 0, 0, 0, 0, 0
    for j = 1, #got, 2 do
      local m, v = got[j], tonumber(got[j + 1])
      if not (v and v >= 1e14 and v <= horizon and v % 1 == 0) then return full(keys, args, ro, now, got) end
      local sid = SLOT_ID[m]
      if sid == nil then
        -- Not a slot: the full path's error (a long member not kept).
        if #m > 1031 then return full(keys, args, ro, now, got) end
        local k
        k, sid = split_slot(m)
        if known >= 4096 then SLOT_K, SLOT_ID, FIRST, known = {}, {}, {}, 0 end
        SLOT_K[m], SLOT_ID[m] = k, sid or false
        known = known + 1
      end
      if v > now then
        if not sid then return full(keys, args, ro, now, got) end
        live = live + 1
      else
        if not sid and m ~= 'B' then return full(keys, args, ro, now, got) end
        old_n = old_n + 1
        OLD[old_n] = m
      end
      if sid == id then
        if p > 0 and v ~= expires then return full(keys, args, ro, now, got) end
        expires = v
        p = p + 1
        local k = SLOT_K[m]
        if k > top_k then top_k = k end
      elseif sid then
        others_n = others_n + 1
        OTHER[others_n] = v
      end
    end
    if top_k ~= p or p > CONCURRENCY_MAX_LIMIT then return full(keys, args, ro, now, got) end
    -- CONCURRENCY.decide: the live slots counted up to limit + own + 1,
    -- the others' among them, the others' newest expiry (nil: none).
    local own_live = expires > now and p or 0
    local others = live - own_live
    if others > limit + 1 then others = limit + 1 end
    live = others + own_live
    local newest = OTHER[others_n]
    local slots, last, d
    if op == 'RELEASE' then
      if newest and newest <= now then newest = nil end
      local remaining = limit - others
      if remaining < 0 then remaining = 0 end
      local reset = newest and newest - now or 0
      local r = reset % 1000
      d = { 0, limit, remaining, -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
      if p == 0 or ro then return d end
      -- The lease given back: its slots and the expired entries removed,
      -- or the key when no other lease is live.
      if not newest then
        rcall('UNLINK', key)
        return d
      end
      slots, last = 0, newest
    else
      if op == 'ACQUIRE' then
        if others + n > limit then
          -- The retry: when the (limit − n)-th newest other lease expires.
          local at = others_n - limit + n
          return refused(limit, live, at >= 1 and OTHER[at] - now or true, now, newest, own_live, expires)
        end
        slots = n
      else
        if own_live == 0 then return refused(limit, live, false, now, newest, own_live, expires) end
        slots = p
      end
      -- lease_take.
      expires = now + lim.lease_us
      last = expires
      local remaining = limit - others - slots
      if remaining < 0 then remaining = 0 end
      if newest and newest > last then
        last = newest
        local reset = last - now
        local r = reset % 1000
        d = { 0, limit, remaining, -1, (reset - r) / 1000 + (r > 0 and 1 or 0) }
      else
        d = { 0, limit, remaining, -1, lim.fast_lease_ms }
      end
      if ro then return d end
    end
    -- The expired entries (oldest first, slots + 128 at most), then the
    -- lease's slots past the ones it keeps; its slots; the expiry (never
    -- past the horizon: no score read is).
    local gone = slots + EXPIRED_REMOVED_PER_CALL
    if gone > old_n then gone = old_n end
    for k = slots + 1, p do
      gone = gone + 1
      OLD[gone] = (DEC_OF[k] or memo_dec(k)) .. ':' .. id
    end
    if gone > 0 then rcall('ZREM', key, unpack(OLD, 1, gone)) end
    if slots == 1 then
      rcall('ZADD', key, format('%d', expires), first)
    elseif slots > 1 then
      local score, adds = format('%d', expires), {}
      for k = 1, slots do
        adds[2 * k - 1] = score
        adds[2 * k] = (DEC_OF[k] or memo_dec(k)) .. ':' .. id
      end
      rcall('ZADD', key, unpack(adds))
    end
    local r = last % 1000
    rcall('PEXPIREAT', key, format('%d', (last - r) / 1000 + (r > 0 and 1 or 0)))
    return d
  end
end

FAST = { gcra = fast_gcra, bucket = fast_bucket, log = fast_log, cell = fast_cell, fixed = fast_fixed,
  sliding = fast_sliding, all = fast_all, lease = fast_lease }
return FAST
end
-- fast paths: end

-- define(fname): the command `fname` (nil: none), made on its first call
-- (see `call`, which hands itself in for the fast paths' fallbacks). One
-- function rather than a table of them: the EVAL form
-- builds it on every call.
local function define(fname, call)
if fname == 'rl_gcra' then
  local command, lookup = kind_command('rl_gcra', 'rl.gcra', need_gcra(), 3)
  return command, not eval_form and need_fast(call).gcra(lookup)
end
if fname == 'rl_tokenbucket' then
  local command, lookup = kind_command('rl_tokenbucket', 'rl.tokenbucket', need_buckets(), 3)
  return command, not eval_form and need_fast(call).bucket(lookup, 'rl_tokenbucket', false)
end
if fname == 'rl_leakybucket' then
  need_buckets()
  local command, lookup = kind_command('rl_leakybucket', 'rl.leakybucket', LEAKYBUCKET, 3)
  return command, not eval_form and need_fast(call).bucket(lookup, 'rl_leakybucket', true)
end
if fname == 'rl_slidinglog' then
  local command, lookup = kind_command('rl_slidinglog', 'rl.slidinglog', need_slidinglog(), 2)
  return command, not eval_form and need_fast(call).log(lookup)
end

local FIXED_SYNTAX = 'ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [ALIGN EPOCH | ALIGN FIRST] after the parameters'
local E_ZONE_SECONDS = 'ERR syntax error: TZ takes a calendar window (DAY, WEEK, MONTH or YEAR), not one in seconds'

if fname == 'rl_fixedwindow' then
need_fixed()
local fixed_cached, fixed_lookup = limit_cache()
-- Whether this call's window is in seconds (TZ then says so).
local in_seconds = true
-- ALIGN EPOCH | ALIGN FIRST, as o.own.
local function align_option(W, i, a, o)
  if W ~= 'ALIGN' or o.own then
    if W == 'TZ' and in_seconds then fail(E_ZONE_SECONDS) end
    return nil
  end
  local value = a[i + 1]
  if value == nil then fail(FIXED_SYNTAX) end
  if is_kw(value, 'EPOCH') then
    o.own = 'EPOCH'
  elseif is_kw(value, 'FIRST') then
    o.own = 'FIRST'
  else
    fail(FIXED_SYNTAX)
  end
  return 2
end
return function(keys, args, ro, at_now)
  local key = keys[1]
  if #keys ~= 1 then e_one_key('rl_fixedwindow') end
  local count, now = trailing_now(args)
  if at_now then now = at_now end
  if count < 2 then wrong_arity('rl.fixedwindow') end
  local lim, taken = fixed_cached(FIXEDWINDOW, args, 2), 0
  if lim.unit then lim, taken = FIXEDWINDOW.zoned(lim, args, 3, FIXED_SYNTAX) end
  in_seconds = not lim.unit
  local o = options_or_default(args, count, 3 + taken, now, align_option, FIXED_SYNTAX)
  if o.own == 'FIRST' then
    if lim.unit then fail('ERR ALIGN FIRST takes a window in seconds: a calendar window starts at its boundaries') end
    local first = lim.first_variant
    if not first then
      first = { limit = lim.limit, w = lim.w, first = true, alg = FIXEDWINDOW }
      lim.first_variant = first
    end
    lim = first
  end
  return run_one(key, lim, o, ro)
end, not eval_form and need_fast(call).fixed(fixed_lookup)
end

local SLIDING_SYNTAX = 'ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [BUCKETS k] after the parameters'

if fname == 'rl_slidingwindow' then
need_sliding()
local sliding_cached, sliding_lookup = limit_cache()
-- BUCKETS k, as o.own.
local function buckets_option(W, i, a, o)
  if W ~= 'BUCKETS' or o.own or a[i + 1] == nil then return nil end
  o.own = integer(a, i + 1, 'BUCKETS')
  return 2
end
return function(keys, args, ro, at_now)
  local key = keys[1]
  if #keys ~= 1 then e_one_key('rl_slidingwindow') end
  local count, now = trailing_now(args)
  if at_now then now = at_now end
  if count < 2 then wrong_arity('rl.slidingwindow') end
  local lim = sliding_cached(SLIDINGWINDOW, args, 2)
  local o = options_or_default(args, count, 3, now, buckets_option, SLIDING_SYNTAX)
  local k = o.own
  if k then
    -- The limit with k sub-windows, kept beside the limit (valid k only).
    local variants = lim.bucket_variants
    local bucketed = variants and variants[k]
    if not bucketed then
      bucketed = bucket_window_new(lim.limit, lim.w, k)
      if not variants then variants = {}; lim.bucket_variants = variants end
      variants[k] = bucketed
    end
    return run_one(key, bucketed, o, ro)
  end
  if lim.limit > MAX_EXACT then e_inexact('limit') end
  return run_one(key, lim, o, ro)
end, not eval_form and need_fast(call).sliding(sliding_lookup)
end

-- RL.CONCURRENCY key limit lease ACQUIRE id [TOKENS n] [PEEK] [BLOCK d] |
-- RENEW id [PEEK] | RELEASE id [PEEK] (src/command/concurrency.rs).
if fname == 'rl_concurrency' then
need_concurrency()
local concurrency_cached, concurrency_lookup = limit_cache()
local lease_op, check_lease_id = CONCURRENCY.op, CONCURRENCY.check_id
return function(keys, args, ro, at_now)
  local key = keys[1]
  if #keys ~= 1 then e_one_key('rl_concurrency') end
  local count, now = trailing_now(args)
  if at_now then now = at_now end
  if count < 4 then wrong_arity('rl.concurrency') end
  local base = concurrency_cached(CONCURRENCY, args, 2)
  local op = lease_op(args[3])
  if op == nil then fail(E_LEASE_OP) end
  local id = args[4]
  check_lease_id(id)
  local o
  if op == 'ACQUIRE' then
    o = options_or_default(args, count, 5, now, nil, E_LEASE_SYNTAX)
    if o.force then fail(E_FORCE.concurrency) end
    if o.refund then fail(E_LEASE_SYNTAX) end
  else
    -- Only PEEK (and the library's NOW), each at most once.
    o = default_options(now)
    local i, now_seen = 5, now ~= nil
    while i <= count do
      local W = upper(args[i])
      if W == 'PEEK' and not o.peek then
        o.peek = true
        i = i + 1
      elseif W == 'NOW' and not now_seen then
        now_seen = true
        o.now = now_option(args, i + 1, E_LEASE_SYNTAX)
        i = i + 2
      else
        fail(E_LEASE_SYNTAX)
      end
    end
  end
  -- The call's own limit: the cached one holds no lease.
  local lim = { alg = CONCURRENCY, limit = base.limit, lease_us = base.lease_us, op = op, id = id }
  return run_one(key, lim, o, ro)
end, not eval_form and need_fast(call).lease(concurrency_lookup, CONCURRENCY.split_slot)
end

-- CL.THROTTLE key max_burst count_per_period period [quantity], then the
-- library's NOW unix_µs last (src/command/throttle.rs).
if fname == 'cl_throttle' then
need_cell()
local cell_cached, cell_lookup = limit_cache()
return function(keys, args, ro, at_now)
  local key = keys[1]
  if #keys ~= 1 then e_one_key('cl_throttle') end
  local count, now = trailing_now(args)
  if at_now then now = at_now end
  local o = default_options(now)
  if count < 3 or count > 4 then wrong_arity('cl.throttle') end
  local lim = cell_cached(CELL, args, 3)
  if count == 4 then o.n = integer_at_least(args, 4, 'quantity', 0, '>= 0') end
  return run_one(key, lim, o, ro, true)
end, not eval_form and need_fast(call).cell(cell_lookup)
end

-- RL.ALL numkeys key… limit [FORCE]… [TOKENS n | REFUND n] [PEEK] [BLOCK d]
-- [WITHLIMITS] (src/command/all.rs, src/command/decide/mod.rs all); FCALL's
-- numkeys and keys stand for the command's.
-- Each kind: what builds its algorithm (false: refused), its parameter
-- count and its limits' cache.
if fname == 'rl_all' then
-- Plans one key: its decision and what to write (nil: nothing).
local function plan_key(key, lim, o)
  local alg = lim.alg
  if alg.plan then return alg.plan(key, lim, o) end
  return plan_string(key, alg, lim, o)
end

local function apply(key, lim, write, expire_ms)
  if lim.alg.apply then
    lim.alg.apply(key, write)
  else
    apply_string(key, write, expire_ms)
  end
end

-- The sliding-log entries a call may touch, against the module's
-- sliding-log-call-budget (src/command/decide/mod.rs check_budget); returns
-- what it leaves: the most stale entries the whole call removes, shared by
-- its limits in order (z_old_members).
local function check_budget(lims, n, forced)
  local entries = 0
  for i = 1, #lims do
    local alg = lims[i].alg
    if alg == SLIDINGLOG and forced and forced[i] then
      entries = entries + log_forced_entries(lims[i], n)
    elseif alg == SLIDINGLOG or alg == CONCURRENCY then
      entries = entries + log_entries(lims[i], n)
    end
  end
  if entries > SLIDING_LOG_CALL_BUDGET then e_over_budget(entries) end
  return SLIDING_LOG_CALL_BUDGET - entries
end

local KINDS = {
  GCRA = { need_gcra, 3, limit_cache() },
  TOKENBUCKET = { need_buckets, 3, limit_cache() },
  LEAKYBUCKET = { false, 3 },
  FIXEDWINDOW = { need_fixed, 2, limit_cache() },
  SLIDINGWINDOW = { need_sliding, 2, limit_cache() },
  SLIDINGLOG = { need_slidinglog, 2, limit_cache() },
  CONCURRENCY = { need_concurrency, 2, limit_cache() },
}
local OPTION_WORDS = { TOKENS = true, REFUND = true, FORCE = true, PEEK = true, BLOCK = true, WITHLIMITS = true }

local E_ZONE_SECONDS = 'ERR syntax error: TZ takes a calendar window (DAY, WEEK, MONTH or YEAR), not one in seconds'

-- WITHLIMITS, as o.own.
local function withlimits_option(W, i, a, o)
  if W == 'WITHLIMITS' and not o.own then
    o.own = true
    return 1
  end
  if W == 'TZ' then fail(E_ZONE_SECONDS) end
  return nil
end

-- The binding limit (core/src/algorithm/all.rs): when limited, the refusing
-- limit with the longest retry (none counts as longest); when allowed, the
-- fewest remaining; the first on ties.
local function binding(ds)
  local best, b = 1, ds[1]
  for i = 2, #ds do
    local d = ds[i]
    local better
    if d[1] ~= b[1] then
      better = d[1]
    elseif d[1] then
      if not d[4] then
        better = b[4] ~= false
      else
        better = b[4] ~= false and d[4] > b[4]
      end
    else
      better = d[3] < b[3]
    end
    if better then best, b = i, d end
  end
  return best, b
end

return function(keys, args, ro, at_now)
  local n = #keys
  local nargs, now = trailing_now(args)
  if at_now then now = at_now end
  local a = { dec(n) }
  for i = 1, n do a[i + 1] = keys[i] end
  for i = 1, nargs do a[n + 1 + i] = args[i] end
  local count = #a
  if count + 1 < 4 then wrong_arity('rl.all') end
  if n < 1 or n > 64 then e_range('numkeys', '>= 1 and <= 64') end
  local seen = {}
  for i = 1, n do
    if seen[keys[i]] then fail(E_DUPLICATE) end
    seen[keys[i]] = true
  end
  local lims = {}
  local concurrency = false
  -- FORCE after a limit (src/command/all.rs force): that limit's, kept
  -- apart from the cached limits (nil: none forced).
  local forced
  local at = 2 + n
  for i = 1, n do
    if at > count then fail(E_LIMITCOUNT) end
    local W = upper(a[at])
    local kind = KINDS[W]
    if kind then
      if not kind[1] then fail(E_LEAKY_IN_ALL) end
      local alg = kind[1]()
      local lim = kind[3](alg, a, kind[2], at + 1)
      if (lim.limit or 0) > MAX_EXACT then e_inexact('limit') end
      at = at + 1 + kind[2]
      if lim.unit then
        local taken
        lim, taken = FIXEDWINDOW.zoned(lim, a, at)
        at = at + taken
      end
      lims[i] = lim
      if alg == CONCURRENCY then
        -- ACQUIRE id (src/command/all.rs acquire), in a limit of the
        -- call's own (the cached one holds no lease).
        if alg.op(a[at]) ~= 'ACQUIRE' or a[at + 1] == nil then fail(E_ALL_LEASE) end
        alg.check_id(a[at + 1])
        lims[i] = { alg = alg, limit = lim.limit, lease_us = lim.lease_us, op = 'ACQUIRE', id = a[at + 1] }
        at = at + 2
        concurrency = true
      end
      local w = a[at]
      if w and #w == 5 and upper(w) == 'FORCE' then
        if alg == CONCURRENCY then fail(E_FORCE.concurrency) end
        forced = forced or {}
        forced[i] = true
        at = at + 1
      end
    elseif W == 'POLICY' then
      if a[at + 1] == nil then fail(E_LIMITCOUNT) end
      fail(E_POLICY)
    elseif OPTION_WORDS[W] then
      fail(E_LIMITCOUNT)
    elseif W == 'TZ' then
      fail(E_ZONE_SECONDS)
    else
      fail(E_UNKNOWN)
    end
  end
  if at <= count then
    local W = upper(a[at])
    if KINDS[W] or W == 'POLICY' then fail(E_LIMITCOUNT) end
  end
  local o = options(a, at, withlimits_option, nil, now)
  local with_limits = o.own
  if o.force then fail(E_FORCE.in_all) end
  if forced and (o.peek or o.refund or ro) then fail(E_FORCE.syntax) end
  if concurrency and o.refund then fail(E_REFUND_CONCURRENCY) end
  o.stale_left = check_budget(lims, o.n, forced)
  if ro then o.peek = true end
  clock(o)
  local writes, expires, ds = {}, {}, {}
  for i = 1, n do
    if forced then o.force = forced[i] or false end
    ds[i], writes[i], expires[i] = plan_key(keys[i], lims[i], o)
  end
  o.force = false
  local position, d = binding(ds)
  if not o.peek then
    -- A forced limit always writes; the others take when none of them
    -- refuses (src/command/decide/mod.rs all).
    local others_allow = not d[1]
    if not others_allow and forced then
      others_allow = true
      for i = 1, n do
        if not forced[i] and ds[i][1] then others_allow = false end
      end
    end
    for i = 1, n do
      if writes[i] ~= nil and (others_allow or ds[i][1] or (forced and forced[i])) then apply(keys[i], lims[i], writes[i], expires[i]) end
    end
  end
  local reply = { d[1], d[2], d[3], d[4], d[5] }
  reply_ms(reply)
  reply[6] = position
  if with_limits then
    for i = 1, n do
      local r = reply_ms(ds[i])
      for j = 1, 5 do reply[6 + 5 * (i - 1) + j] = r[j] end
    end
  end
  return reply
end, not eval_form and need_fast(call).all(KINDS)
end

if fname == 'rl_version' then
  return function() return VERSION end
end
return nil
end

---------------------------------------------------------------------------
-- Entry points

local COMMANDS, FASTS = {}, {}

-- The command `fname` (nil: none), defined on its first call, with its
-- fast path (FASTS: false for none).
local function command_of(fname, call)
  local command = COMMANDS[fname]
  if command == nil then
    local fast
    command, fast = define(fname, call)
    if command == nil then return nil end
    COMMANDS[fname] = command
    FASTS[fname] = fast or false
  end
  return command
end

-- `now`: the clock a fast path already read (nil: none).
local function call(fname, keys, args, ro, now)
  local command = command_of(fname, call)
  if command == nil then
    return redis.error_reply('ERR unknown function: the first argument of the EVAL form names one (rl_gcra, …)')
  end
  O.ro = ro
  local ok, result = pcall(command, keys, args, ro, now)
  if ok then return result end
  -- A failure raised by `fail` (Redis 7.0's pcall hands back the text of
  -- an error table; later servers the table).
  if type(result) == 'table' and result.err then result = result.err end
  if type(result) ~= 'string' then result = tostring(result) end
  if find(result, '^ERR ') or find(result, '^WRONGTYPE ') then
    return redis.error_reply(result)
  end
  -- Anything else (a command the server refused the script, as Redis 6.2
  -- words it: '@user_script: 1222: The user executing the script can't
  -- run this command …'): replied without a script's location, under its
  -- own error code when it has one, else ERR.
  local text = result
  while true do
    local _, cut = find(text, '^@?[%w_]+: ?%d+: ')
    if cut == nil then break end
    text = sub(text, cut + 1)
  end
  if byte(text, 1) == 45 then text = sub(text, 2) end -- a leading '-'
  if not find(text, '^[A-Z][A-Z]+ ') then text = 'ERR ' .. text end
  return redis.error_reply(text)
end

-- The fast path of `fname` (false: none; nil: no such function).
local fast_of = not eval_form and function(fname)
  if command_of(fname, call) == nil then return nil end
  return FASTS[fname]
end

return call, fast_of
end)()
end

local call, fast_of

if redis.register_function then
  -- Each function tries its fast path (the common forms: an answer, or nil
  -- having read nothing but the key) before the full one.
  local function register(fname)
    local fast, fast_ro
    redis.register_function { function_name = fname, callback = function(keys, args)
      if fast == nil then
        if not call then call, fast_of = build() end
        fast = fast_of(fname)
      end
      if fast then
        local reply = fast(keys, args, false)
        if reply then return reply end
      end
      return call(fname, keys, args, false)
    end }
    redis.register_function { function_name = fname .. '_ro', flags = { 'no-writes' }, callback = function(keys, args)
      if fast_ro == nil then
        if not call then call, fast_of = build() end
        fast_ro = fast_of(fname)
      end
      if fast_ro then
        local reply = fast_ro(keys, args, true)
        if reply then return reply end
      end
      return call(fname, keys, args, true)
    end }
  end
  register('rl_gcra')
  register('rl_tokenbucket')
  register('rl_leakybucket')
  register('rl_fixedwindow')
  register('rl_slidingwindow')
  register('rl_slidinglog')
  register('cl_throttle')
  register('rl_concurrency')
  register('rl_all')
  redis.register_function { function_name = 'rl_version', flags = { 'no-writes' }, callback = function()
    return VERSION
  end }
else
  -- The EVAL form: ARGV[1] names the function. Effects, never the script,
  -- replicate (Redis 6.2 needs asking; later servers only do that).
  if redis.replicate_commands then redis.replicate_commands() end
  call = build(true)
  local fname = ARGV[1]
  local ro = false
  if fname and string.sub(fname, -3) == '_ro' then
    fname = string.sub(fname, 1, -4)
    ro = true
  end
  local args = {}
  for i = 2, #ARGV do args[i - 1] = ARGV[i] end
  return call(fname, KEYS, args, ro)
end
