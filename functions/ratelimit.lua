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
local VERSION = 1

-- Everything is built inside `build`, on the first call: while a library
-- loads, Redis 7.0 exposes only `redis` (not `string`, `math`, `pcall`).
local function build()

local byte, sub, find, upper, format = string.byte, string.sub, string.find, string.upper, string.format
local floor, fmod = math.floor, math.fmod
local rcall, rpcall = redis.call, redis.pcall
local tonumber, type, error, pcall = tonumber, type, error, pcall

local TWO52 = 4503599627370496
local TWO53 = 9007199254740992
local MAX_EXACT = TWO53 - 1
local MAX_PERIOD_US = 31622400000000
local US_PER_SEC = 1000000
-- The module's settings, at their defaults (src/command/settings.rs).
local SLIDING_LOG_MAX_LIMIT = 1000
local SLIDING_LOG_CALL_BUDGET = 4000
local SLIDING_LOG_HARD_MAX = 100000
local STALE_REMOVED_PER_CALL = 128

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
local E_UNKNOWN = 'ERR unknown limit type: expected GCRA, TOKENBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or POLICY name'
local E_LEAKY_IN_ALL = 'ERR LEAKYBUCKET cannot be part of RL.ALL: its \'allowed after a delay\' has no all-or-nothing meaning'
local E_POLICY = 'ERR policies are module data: POLICY is not available in the Functions library (use the module, or give the limit itself)'
-- The library's own: a value the module accepts that Lua cannot compute
-- exactly.
local E_INEXACT_STATE = 'ERR the value at this key holds a number above 9007199254740991 (2^53 - 1), which the Functions library cannot compute exactly'

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
  if n >= 16 then
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

-- The options after the parameters, from `from`: [TOKENS n | REFUND n]
-- [PEEK] [BLOCK duration] [NOW unix_µs]; `own(word, i)` answers how many
-- words a command's own option takes (nil: a syntax error).
-- Returns {refund, n, peek, block_us, now}.
local function options(a, from, own, syntax)
  local o = { refund = false, n = 1, peek = false, block_us = nil, now = nil }
  local op_seen, block_seen, now_seen = false, false, false
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
    elseif W == 'BLOCK' and not block_seen then
      block_seen = true
      o.block_us = seconds_as_us(a, i + 1, 'BLOCK', syntax)
      i = i + 2
    elseif W == 'NOW' and not now_seen then
      now_seen = true
      o.now = now_option(a, i + 1, syntax)
      i = i + 2
    else
      local taken = own and own(W, i)
      if not taken or taken < 1 then fail(syntax or E_SYNTAX) end
      i = i + taken
    end
  end
  return o
end

---------------------------------------------------------------------------
-- Decisions: {limited, limit, remaining, retry_after_us (false: none),
-- reset_after_us} (core/src/algorithm/mod.rs Decision).

local function decision(limited, limit, remaining, retry, reset)
  return { limited, limit, remaining, retry, reset }
end

-- A refund's answer: the limiter as a zero-cost take reads it.
local function refunded(alg, lim, state, now)
  local d = alg.take(lim, state, now, 0)
  d[1] = false
  d[4] = false
  return d
end

local DELETE = 'del'

---------------------------------------------------------------------------
-- GCRA (core/src/algorithm/gcra.rs). State: the TAT in µs, decimal.

local GCRA = { command = 'RL.GCRA' }

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

function GCRA.decode(lim, inner)
  return parse_decimal(inner)
end

local function gcra_remaining(lim, ttl)
  local x = lim.tau - ttl
  if x <= 0 then return 0 end
  return (floor_div(x, lim.t))
end

function GCRA.take(lim, tat, now, cost)
  if tat == nil or tat < now then tat = now end
  local ttl = tat - now
  if cost > lim.limit then
    return decision(true, lim.limit, gcra_remaining(lim, ttl), false, ttl)
  end
  local inc = lim.t * cost
  local new_tat = tat + inc
  local new_ttl = new_tat - now
  if new_ttl > lim.tau then
    return decision(true, lim.limit, gcra_remaining(lim, ttl), new_ttl - lim.tau, ttl)
  end
  local upd
  if inc > 0 then upd = { dec(new_tat), new_tat } end
  return decision(false, lim.limit, gcra_remaining(lim, new_ttl), false, new_ttl), upd
end

function GCRA.refund(lim, tat, now, tokens)
  if tat == nil then return refunded(GCRA, lim, nil, now), nil end
  local new_tat = tat - lim.t * tokens
  if new_tat < now then new_tat = now end
  if new_tat <= now then return refunded(GCRA, lim, nil, now), DELETE end
  return refunded(GCRA, lim, new_tat, now), { dec(new_tat), new_tat }
end

---------------------------------------------------------------------------
-- Token bucket (core/src/algorithm/token_bucket.rs). State: when the bucket
-- is full again, `full_at_us[:remainder]`, remainder in 1/refill_tokens µs.
-- Deficits ("units" of 1/r µs) are kept as pairs (whole µs, remainder < r).

local TOKENBUCKET = { command = 'RL.TOKENBUCKET' }

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
    if not us then return us end
    return { us, 0 }
  end
  local us, rem = parse_decimal(sub(inner, 1, colon - 1)), parse_decimal(sub(inner, colon + 1))
  if us == nil or rem == nil then return nil end
  if us == false or rem == false then return false end
  return { us, rem }
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
  return decision(limited, lim.capacity, bucket_remaining(lim, dq, dr), retry, dq + (dr > 0 and 1 or 0))
end

-- `n × p` units as (µs, remainder); nil when past 2^53 µs.
local function bucket_units(lim, n)
  return muldiv(n, lim.p, 0, lim.r)
end

local function bucket_state(lim, now, dq, dr)
  local full_at = now + dq
  local value = dr == 0 and dec(full_at) or (dec(full_at) .. ':' .. dec(dr))
  return { value, full_at + (dr > 0 and 1 or 0) }
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
  local upd
  if cost > 0 then upd = bucket_state(lim, now, nq, nr) end
  return bucket_decision(lim, false, nq, nr, false), upd
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
  local w = bucket_state(lim, now, nq, nr)
  return refunded(alg, lim, { now + nq, nr }, now), w
end

---------------------------------------------------------------------------
-- Leaky bucket (core/src/algorithm/leaky_bucket.rs): the token bucket's
-- arithmetic and state; an accepted request's retry_after is its wait.

local LEAKYBUCKET = { command = 'RL.LEAKYBUCKET', decode = TOKENBUCKET.decode }

function LEAKYBUCKET.parse(a, at)
  local capacity = integer(a, at, 'capacity')
  local r = integer(a, at + 1, 'leak_tokens')
  local p = seconds_as_us(a, at + 2, 'leak_period')
  return bucket_new(capacity, r, p, { 'leak_tokens', 'leak_period' })
end

function LEAKYBUCKET.take(lim, f, now, cost)
  local d, upd = TOKENBUCKET.take(lim, f, now, cost)
  if not d[1] then
    local dq, dr = bucket_debt(lim, f, now)
    d[4] = dq + (dr > 0 and 1 or 0)
  end
  return d, upd
end

LEAKYBUCKET.refund = TOKENBUCKET.refund

---------------------------------------------------------------------------
-- Fixed window (core/src/algorithm/fixed_window.rs). State:
-- `[F]<window_start_us>:<count>`.

local FIXEDWINDOW = { command = 'RL.FIXEDWINDOW' }

local function check_limit_and_window(limit, window_us)
  if limit < 1 then e_range('limit', '>= 1') end
  if window_us < 1 or window_us > MAX_PERIOD_US then e_period('window') end
end

function FIXEDWINDOW.parse(a, at)
  local limit = integer(a, at, 'limit')
  local window_us = seconds_as_us(a, at + 1, 'window')
  check_limit_and_window(limit, window_us)
  if limit > MAX_EXACT then e_inexact('limit') end
  return { limit = limit, w = window_us, first = false }
end

function FIXEDWINDOW.decode(lim, inner)
  local first = byte(inner, 1) == 70 -- F
  if first then inner = sub(inner, 2) end
  local colon = find(inner, ':', 1, true)
  if colon == nil then return nil end
  local start, count = parse_decimal(sub(inner, 1, colon - 1)), parse_decimal(sub(inner, colon + 1))
  if start == nil or count == nil then return nil end
  if start == false or count == false then return false end
  if first ~= lim.first then
    fail('ERR this key\'s window was started with ALIGN ' .. (first and 'FIRST' or 'EPOCH') ..
      ': call it with ALIGN ' .. (first and 'FIRST' or 'EPOCH') .. ', or DEL the key first')
  end
  return { start, count }
end

-- The window counted at now: its start and count.
local function fixed_counted(lim, s, now)
  if s and s[1] > now then return s[1], s[2] end
  if not lim.first then
    local start = now - fmod(now, lim.w)
    if s and s[1] == start then return start, s[2] end
    return start, 0
  end
  if s and now < s[1] + lim.w then return s[1], s[2] end
  return now, 0
end

local function fixed_value(lim, start, count)
  return (lim.first and 'F' or '') .. dec(start) .. ':' .. dec(count)
end

function FIXEDWINDOW.take(lim, s, now, cost)
  local start, count = fixed_counted(lim, s, now)
  local finish = start + lim.w
  local to_end = finish - now
  local function d(limited, c, retry)
    local remaining = lim.limit - c
    if remaining < 0 then remaining = 0 end
    return decision(limited, lim.limit, remaining, retry, c > 0 and to_end or 0)
  end
  if cost > lim.limit then return d(true, count, false) end
  local new_count = count + cost
  if new_count > lim.limit then return d(true, count, to_end) end
  local upd
  if cost > 0 then upd = { fixed_value(lim, start, new_count), finish } end
  return d(false, new_count, false), upd
end

function FIXEDWINDOW.refund(lim, s, now, tokens)
  if s == nil then return refunded(FIXEDWINDOW, lim, nil, now), nil end
  local start, count = fixed_counted(lim, s, now)
  if start ~= s[1] then count = 0 end
  local new_count = count - tokens
  if new_count <= 0 then return refunded(FIXEDWINDOW, lim, nil, now), DELETE end
  local ns = { s[1], new_count }
  return refunded(FIXEDWINDOW, lim, ns, now), { fixed_value(lim, s[1], new_count), s[1] + lim.w }
end

---------------------------------------------------------------------------
-- Sliding window counter (core/src/algorithm/sliding_window.rs). State:
-- `<window_start_us>:<previous>:<current>`.

local SLIDINGWINDOW = { command = 'RL.SLIDINGWINDOW' }

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
  if a == false or b == false or c == false then return false end
  return { a, b, c }
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
  local function reset_after(cur)
    if cur > 0 then return start + 2 * w - now end
    if previous > 0 then return start + w - now end
    return 0
  end
  -- ⌈previous × (W − elapsed) / W⌉: the weighted previous count.
  local pq, pr = muldiv(previous, w - elapsed, 0, w)
  if pq == nil then fail(E_OVERFLOW) end
  local pc = pq + (pr > 0 and 1 or 0)
  local function remaining(cur)
    local x = limit - cur - pc
    if x < 0 then return 0 end
    return x
  end
  if cost > limit then
    return decision(true, limit, remaining(current), false, reset_after(current))
  end
  local headroom = limit - current - cost
  if pc <= headroom then
    local new_current = current + cost
    local upd
    if cost > 0 then upd = { dec(start) .. ':' .. dec(previous) .. ':' .. dec(new_current), start + 2 * w } end
    return decision(false, limit, remaining(new_current), false, reset_after(new_current)), upd
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
  return decision(true, limit, remaining(current), retry, reset_after(current))
end

function SLIDINGWINDOW.refund(lim, s, now, tokens)
  if s == nil then return refunded(SLIDINGWINDOW, lim, nil, now), nil end
  local start, _, previous, current = sliding_view(lim, s, now)
  local new_current = current - tokens
  if new_current < 0 then new_current = 0 end
  if previous == 0 and new_current == 0 then return refunded(SLIDINGWINDOW, lim, nil, now), DELETE end
  local ns = { start, previous, new_current }
  return refunded(SLIDINGWINDOW, lim, ns, now),
    { dec(start) .. ':' .. dec(previous) .. ':' .. dec(new_current), start + 2 * lim.w }
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
  return decision(true, d[2], 0, retry, reset)
end

local function ceil_ms(us)
  return ceil_div(us, 1000)
end

-- Plans one string-state limiter: reads the key, decides at `at.now`.
-- Returns {decision, blocked, write} where write is nil (nothing), or
-- {value, expire_ms} (SET … PXAT), or DELETE.
local function plan_string(key, alg, lim, at)
  local now = at.now
  local stored = rpcall('GET', key)
  if type(stored) == 'table' then fail(E_WRONGTYPE) end
  local block_end, inner = nil, stored
  if stored and byte(stored, 1) == 66 then -- B
    local semi = find(stored, ';', 2, true)
    if semi == nil then e_invalid(alg.command) end
    block_end = parse_decimal(sub(stored, 2, semi - 1))
    if block_end == nil then e_invalid(alg.command) end
    if block_end == false then fail(E_INEXACT_STATE) end
    inner = sub(stored, semi + 1)
  end
  local state
  if stored and not (block_end and inner == '') then
    state = alg.decode(lim, inner)
    if state == nil then e_invalid(alg.command) end
    if state == false then fail(E_INEXACT_STATE) end
  end
  local in_force = block_end and block_end > now and block_end or nil
  local d, write, blocked = nil, nil, false
  if not at.refund then
    local upd
    d, upd = alg.take(lim, state, now, at.n)
    if in_force then d = blocked_decision(d, in_force, now) end
    blocked = in_force ~= nil
    if not d[1] then
      if upd then write = { upd[1], ceil_ms(upd[2]) } end
    elseif at.block_us and stored and d[4] then
      local new_until = now + at.block_us
      if in_force and in_force > new_until then new_until = in_force end
      d = blocked_decision(d, new_until, now)
      local ms = rpcall('PEXPIRETIME', key)
      if type(ms) ~= 'number' then
        -- Redis 6.2: no PEXPIRETIME; the expiry from PTTL and the clock.
        local ttl = rcall('PTTL', key)
        ms = ttl >= 0 and (at.now_ms + ttl) or -1
      end
      local current_us = ms > 0 and ms * 1000 or 0
      if new_until > current_us then current_us = new_until end
      write = { 'B' .. dec(new_until) .. ';' .. inner, ceil_ms(current_us) }
    end
  else
    local w
    d, w = alg.refund(lim, state, now, at.n)
    if w == DELETE then
      if in_force then
        write = { 'B' .. dec(in_force) .. ';', ceil_ms(in_force) }
      else
        write = DELETE
      end
    elseif w then
      if in_force then
        local exp = w[2]
        if in_force > exp then exp = in_force end
        write = { 'B' .. dec(in_force) .. ';' .. w[1], ceil_ms(exp) }
      else
        write = { w[1], ceil_ms(w[2]) }
      end
    end
  end
  return { d, blocked and d[1], write }
end

local function apply_string(key, write)
  if write == nil then return end
  if write == DELETE then
    rcall('DEL', key)
  else
    rcall('SET', key, write[1], 'PXAT', write[2])
  end
end

---------------------------------------------------------------------------
-- Commands

-- The five integers of a reply in ms (src/command/mod.rs reply_fields).
local function reply_ms(d)
  return { d[1] and 1 or 0, d[2], d[3], d[4] and ceil_ms(d[4]) or -1, ceil_ms(d[5]) }
end

local function clock(at, o)
  if o.now then
    at.now = o.now
    at.now_ms = floor(o.now / 1000)
  else
    local t = rcall('TIME')
    local s, us = tonumber(t[1]), tonumber(t[2])
    at.now = s * US_PER_SEC + us
    at.now_ms = s * 1000 + floor(us / 1000)
  end
end

local function at_of(o, ro)
  return { refund = o.refund, n = o.n, block_us = o.block_us, peek = o.peek or ro }
end

-- One string-state limiter: plan, write unless PEEK, reply.
local function run_one(key, alg, lim, o, ro)
  local at = at_of(o, ro)
  clock(at, o)
  local p = plan_string(key, alg, lim, at)
  if not at.peek then apply_string(key, p[3]) end
  return reply_ms(p[1])
end

-- The module's arity error, named as the module's command.
local function wrong_arity(command)
  fail('ERR wrong number of arguments for \'' .. command .. '\' command')
end

-- argv as the module sees it from argv[1]: the key, then the arguments.
local function argv_of(fname, keys, args)
  if #keys ~= 1 then
    fail('ERR ' .. fname .. ' takes exactly one key: FCALL ' .. fname .. ' 1 key …')
  end
  local a = { keys[1] }
  for i = 1, #args do a[i + 1] = args[i] end
  return a
end

-- RL.GCRA, RL.TOKENBUCKET, RL.LEAKYBUCKET (src/command/mod.rs run_kind).
local function kind_command(fname, command, alg, params)
  return function(keys, args, ro)
    local a = argv_of(fname, keys, args)
    if #a + 1 < 2 + params then wrong_arity(command) end
    local lim = alg.parse(a, 2)
    lim.alg = alg
    local o = options(a, 2 + params)
    return run_one(a[1], alg, lim, o, ro)
  end
end

local COMMANDS = {}

COMMANDS.rl_gcra = kind_command('rl_gcra', 'rl.gcra', GCRA, 3)
COMMANDS.rl_tokenbucket = kind_command('rl_tokenbucket', 'rl.tokenbucket', TOKENBUCKET, 3)
COMMANDS.rl_leakybucket = kind_command('rl_leakybucket', 'rl.leakybucket', LEAKYBUCKET, 3)

local FIXED_SYNTAX = 'ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [ALIGN EPOCH | ALIGN FIRST] after the parameters'

COMMANDS.rl_fixedwindow = function(keys, args, ro)
  local a = argv_of('rl_fixedwindow', keys, args)
  if #a + 1 < 4 then wrong_arity('rl.fixedwindow') end
  local lim = FIXEDWINDOW.parse(a, 2)
  lim.alg = FIXEDWINDOW
  local align
  local o = options(a, 4, function(W, i)
    if W ~= 'ALIGN' or align ~= nil then return nil end
    local value = a[i + 1]
    if value == nil then fail(FIXED_SYNTAX) end
    if is_kw(value, 'EPOCH') then
      align = 'EPOCH'
    elseif is_kw(value, 'FIRST') then
      align = 'FIRST'
    else
      fail(FIXED_SYNTAX)
    end
    return 2
  end, FIXED_SYNTAX)
  lim.first = align == 'FIRST'
  return run_one(a[1], FIXEDWINDOW, lim, o, ro)
end

local SLIDING_SYNTAX = 'ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [BUCKETS k] after the parameters'

COMMANDS.rl_slidingwindow = function(keys, args, ro)
  local a = argv_of('rl_slidingwindow', keys, args)
  if #a + 1 < 4 then wrong_arity('rl.slidingwindow') end
  local lim = SLIDINGWINDOW.parse(a, 2)
  local buckets
  local o = options(a, 4, function(W, i)
    if W ~= 'BUCKETS' or buckets ~= nil or a[i + 1] == nil then return nil end
    buckets = integer(a, i + 1, 'BUCKETS')
    return 2
  end, SLIDING_SYNTAX)
  if buckets ~= nil then
    fail('ERR BUCKETS is not available in the Functions library yet')
  end
  if lim.limit > MAX_EXACT then e_inexact('limit') end
  lim.alg = SLIDINGWINDOW
  return run_one(a[1], SLIDINGWINDOW, lim, o, ro)
end

COMMANDS.rl_version = function()
  return VERSION
end

---------------------------------------------------------------------------
-- Entry points

local function call(fname, keys, args, ro)
  local command = COMMANDS[fname]
  if command == nil then
    return redis.error_reply('ERR unknown function: the first argument of the EVAL form names one (rl_gcra, …)')
  end
  local ok, result = pcall(command, keys, args, ro)
  if ok then return result end
  -- A failure raised by `fail` (Redis 7.0's pcall hands back the text of
  -- an error table; later servers the table).
  if type(result) == 'table' and result.err then result = result.err end
  if type(result) == 'string' and (find(result, '^ERR ') or find(result, '^WRONGTYPE ')) then
    return redis.error_reply(result)
  end
  error(result, 0)
end

return call
end

local call

if redis.register_function then
  local function register(fname)
    redis.register_function { function_name = fname, callback = function(keys, args)
      call = call or build()
      return call(fname, keys, args, false)
    end }
    redis.register_function { function_name = fname .. '_ro', flags = { 'no-writes' }, callback = function(keys, args)
      call = call or build()
      return call(fname, keys, args, true)
    end }
  end
  register('rl_gcra')
  register('rl_tokenbucket')
  register('rl_leakybucket')
  register('rl_fixedwindow')
  register('rl_slidingwindow')
  redis.register_function { function_name = 'rl_version', flags = { 'no-writes' }, callback = function()
    return VERSION
  end }
else
  -- The EVAL form: ARGV[1] names the function.
  call = build()
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
