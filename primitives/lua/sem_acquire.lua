--@uses clock keep limit_of weight_of invalid next_fence keep_fence fence_member lone_of spread_lone holder_of top_fence holders_in drop_dead heartbeat
--@keys holders gone who weights limit
-- The acquire of a Semaphore: one permit, or several at once (AcquireN).
-- KEYS: 1 holders (zset: token -> expiry, server ms, and '#' .. token ->
-- its fence, server µs; or, a lone holder, token -> its fence, the key's
-- expiry its own: see fence_member), 2 the tokens given back in the
-- last $MARKER_MS ms (see remember), and under the member '#' the last
-- fence while it is not behind the server's clock: see keep_fence,
-- 3 holders' annotations (hash token -> annotation), 4 holders' weights
-- (hash token -> permits, only above one) and the waiters' marks (fields
-- "!": until when, server ms, a waiter is waiting; "~": until when one
-- waits for several permits), 5 the limit SetLimit stored (absent: the
-- constructor's). (The layout's legacy keys are not passed.)
-- ARGV: kit's attempt header (1 token, 2 ttl ms, 3 for a waiting attempt
-- the waiter timeout ms ("0" for a Try), 4 annotation ("" for none), 5 the
-- retention ms: how long a stored limit outlives a grant), 6 the
-- constructor's limit, 7 permits asked for.
-- Reply: {1, fence} granted; {0, ms until the earliest holder expires (a
-- waiting attempt: at most a third of its waiter timeout), that holder's
-- annotation} held (0: a token given back, refused); an $INVALID error
-- reply when more permits are asked for than the limit.
--
-- Expired holders are swept first, by the server's clock. A token given
-- back is refused: a late copy of an attempt whose acquisition ended
-- without a grant it saw. A grant needs the permits held (each holder
-- counting its weight) plus those asked for to stay within the limit. Its
-- fence is the server's clock in µs, above every fence the name holds
-- (top_fence: holders granted in the same µs) and the one kept while
-- ahead (next_fence); a fence raised above the clock is kept beside the
-- given-back tokens too (keep_fence), so that it outlives its holder. A
-- grant of one permit without an annotation on a name with no holder is
-- kept in the lone form (see fence_member): one member, scored by its
-- fence, and the key's expiry. Nothing is written beside a lone holder (an
-- annotation, a weight, a waiter's mark): a grant, or a mark, spreads it
-- first, so that its release need not look for them.
--
-- A waiting attempt that is refused marks the semaphore as waited for
-- (the "!" field), for the waiter timeout, and asks to be heard from again
-- within a third of it: a release sends its message only while the mark
-- lives, so that a release nobody waits for writes nothing but its own
-- entries. A waiting attempt at several permits marks it with "~" too:
-- while that mark lives, a release wakes every waiter instead of as many
-- as it freed permits, since the oldest waiters may need more than were
-- freed.
--
-- The fast path is the grant of one permit, without an annotation, where
-- no given-back token, annotation, weight, waiter's mark or stored limit
-- exists, to a token that does not hold, with room and no holder expired:
-- the slow path's grant, written out, with one TIME. On a name with no
-- key at all (one EXISTS for the five) it is TIME, ZADD and PEXPIRE (the
-- lone form); when the holders are the only key, their reads follow (the
-- first type-checks them), and a lone holder is spread. Any other case
-- goes on to the slow path.
if ARGV[7] == '1' and ARGV[4] == '' then
  local e = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  local top = {}
  if e == 1 then top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') end
  if e == 0 then
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('ZADD', KEYS[1], us, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, us}
  elseif top[1] then -- the holders, the only key: not the token's, fewer than the limit, the earliest live
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local now = math.floor(us / 1000)
    local ttl = tonumber(ARGV[2])
    local f, tf = us, tonumber(top[2])
    if tf >= 1e14 then f = math.max(us, tf + 1) end
    if string.sub(top[1], 1, 1) ~= '#' and tf >= 1e14 then -- a lone holder (live: its key is)
      local pttl = redis.call('PTTL', KEYS[1])
      if top[1] ~= ARGV[1] and tonumber(ARGV[6]) > 1 and pttl > 0 then -- spread_lone, written out, and the grant
        redis.call('ZADD', KEYS[1], now + pttl, top[1], tf, '#' .. top[1], now + ttl, ARGV[1], f, '#' .. ARGV[1])
        if pttl < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
        if f > us then -- keep_fence, written out (no given-back token exists)
          redis.call('ZADD', KEYS[2], f, '#')
          redis.call('PEXPIRE', KEYS[2], $MARKER_MS + math.ceil((f - us) / 1000))
        end
        return {1, f}
      end
    else
      local held = redis.call('ZCOUNT', KEYS[1], '-inf', '(100000000000000')
      local room = held < tonumber(ARGV[6])
      if room and redis.call('ZSCORE', KEYS[1], ARGV[1]) then room = false end
      if room and held > 0 then room = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) > now end
      if room then
        redis.call('ZADD', KEYS[1], now + ttl, ARGV[1], f, '#' .. ARGV[1])
        if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
        if f > us then -- keep_fence, written out (no given-back token exists)
          redis.call('ZADD', KEYS[2], f, '#')
          redis.call('PEXPIRE', KEYS[2], $MARKER_MS + math.ceil((f - us) / 1000))
        end
        return {1, f}
      end
    end
  end
end
--@slow
local now, us = clock()
local ttl, n = tonumber(ARGV[2]), tonumber(ARGV[7])
redis.call('ZCARD', KEYS[1]) -- type-checks the holders before any write
local g = redis.call('ZMSCORE', KEYS[2], ARGV[1], '#')
local limit, lbad = limit_of(KEYS[5], ARGV[6], '1'); if not limit then return lbad end
redis.call('HLEN', KEYS[3])
local weighted = redis.call('HLEN', KEYS[4]) > 0
if g[1] then return {0, 0, false} end
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], ARGV[1], ARGV[4]); keep(KEYS[3], ttl) end
end
local function keepall()
  keep(KEYS[1], ttl)
  if n > 1 then keep(KEYS[4], ttl) end
end
local exp, myfence, lone = holder_of(KEYS[1], ARGV[1], now)
if exp and exp > now then
  if lone and ARGV[4] == '' then redis.call('PEXPIRE', KEYS[1], ttl)
  else
    if lone then spread_lone(KEYS[1], now) end -- an annotation is not written beside a lone holder
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]); keepall()
  end
  annotate()
  return {1, myfence or 0}
end
if n > limit then return invalid('asked for ' .. n .. ' permits, above the limit ' .. limit) end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local ltok, top = lone_of(KEYS[1]) -- a lone holder is live (its key is), and holds one permit
local used = 1
if not ltok then
  top = top_fence(KEYS[1])
  local dead = drop_dead(KEYS[1], now)
  for i = 1, #dead do
    redis.call('HDEL', KEYS[3], dead[i]); redis.call('HDEL', KEYS[4], dead[i])
  end
  used = holders_in(KEYS[1])
end
if weighted then
  local ws = redis.call('HGETALL', KEYS[4])
  for i = 1, #ws, 2 do
    if ws[i] == '~' or ws[i] == '!' then
      if tonumber(ws[i + 1]) <= now then redis.call('HDEL', KEYS[4], ws[i]) end
    elseif redis.call('ZSCORE', KEYS[1], ws[i]) then used = used + tonumber(ws[i + 1]) - 1
    else redis.call('HDEL', KEYS[4], ws[i]) end
  end
end
if used + n <= limit then
  local f = next_fence(us, g[2], top and top + 1)
  if fresh and n == 1 and ARGV[4] == '' then -- the lone form
    redis.call('ZADD', KEYS[1], f, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], ttl)
  else
    if ltok then spread_lone(KEYS[1], now) end
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1], f, fence_member(ARGV[1]))
    if n > 1 then redis.call('HSET', KEYS[4], ARGV[1], n) end
    keepall()
  end
  if f > us then keep_fence(KEYS[2], f, us) end
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
  annotate()
  return {1, f}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local hint = tonumber(first[2]) - now
if ltok then hint = redis.call('PTTL', KEYS[1]) end
local wait = tonumber(ARGV[3])
if wait > 0 then
  if ltok then spread_lone(KEYS[1], now) end -- a mark is not written beside a lone holder
  for _, mark in ipairs(n > 1 and {'!', '~'} or {'!'}) do
    if tonumber(redis.call('HGET', KEYS[4], mark) or '0') < now + wait then
      redis.call('HSET', KEYS[4], mark, now + wait)
    end
  end
  keep(KEYS[4], wait)
  hint = math.min(hint, heartbeat(wait))
end
return {0, hint, redis.call('HGET', KEYS[3], first[1])}
