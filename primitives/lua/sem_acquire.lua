--@uses now_ms fence_of keep raise_fence limit_of weight_of invalid
-- The acquire of a Semaphore: one permit, or several at once (AcquireN).
-- KEYS: 1 holders (zset token -> expiry, server ms), 2 the fence counter,
-- 3 holders' fences (hash token -> fence), 4 the tokens that recently
-- finished (released or given back; see remember), 5 holders' annotations
-- (hash token -> annotation), 6 holders' weights (hash token -> permits,
-- only above one; and the field "~": until when, server ms, a waiter for
-- several permits is waiting), 7 the limit SetLimit stored (absent: the
-- constructor's).
-- ARGV: 1 token, 2 ttl ms, 3 the constructor's limit, 4 permits asked
-- for, 5 for a waiting attempt at several permits the waiter timeout ms
-- ("0" otherwise), 6 annotation ("" for none), 7 the fence counter's
-- retention ms (see raise_fence).
-- Reply: {1, fence} granted; {0, ms until the earliest holder expires,
-- that holder's annotation} held (0: a token that finished, refused); an
-- $INVALID error reply when more permits are asked for than the limit.
--
-- Expired holders are swept first, by the server's clock. A token that
-- finished is refused: a late copy of an attempt whose acquisition ended.
-- A grant needs the permits held (each holder counting its weight) plus
-- those asked for to stay within the limit. A waiting attempt at several
-- permits that is refused marks the semaphore as having such a waiter (the
-- "~" field), for the waiter timeout, and asks to be heard from again
-- within a third of it: while the mark lives, a release wakes every
-- waiter instead of as many as it freed permits, since the oldest waiters
-- may need more than were freed.
--
-- The fast path is the grant of one permit, without an annotation, to a
-- token that neither holds nor finished, on a semaphore with room and no
-- holder expired, where no annotation, weight or stored limit exists
-- (one EXISTS for the three): the slow path's grant, written out, with
-- one TIME for the clock and the fence, and the fence counter raised from
-- the GET that checks it (raise_fence's INCR, in one script, is that
-- value plus one). The first write, the fence's HSET, type-checks the
-- fences; when it fails, nothing was written. Any other case goes on to
-- the slow path.
if ARGV[4] == '1' and ARGV[6] == '' and redis.call('EXISTS', KEYS[5], KEYS[6], KEYS[7]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local ttl = tonumber(ARGV[2])
  local used = redis.call('ZCARD', KEYS[1])
  local room = used < tonumber(ARGV[3])
  if room and used > 0 then -- not the token's, and the earliest holder still live
    if redis.call('ZSCORE', KEYS[1], ARGV[1]) then room = false
    else room = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) > now end
  end
  local c = room and redis.call('GET', KEYS[2])
  if room and (not c or c == '0' or (#c <= 18 and string.find(c, '^%-?[1-9]%d*$'))) -- a counter, as is_counter
      and not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    local f = math.max((tonumber(c) or 0) + 1, us)
    if type(redis.pcall('HSET', KEYS[3], ARGV[1], f)) == 'number' then
      redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[7])
      redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
      if used == 0 or redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end -- a new key has no expiry
      if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
      return {1, f}
    end
  end
end
--@slow
local now = now_ms()
local ttl, n = tonumber(ARGV[2]), tonumber(ARGV[4])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local bad = fence_of(KEYS[2]); if bad then return bad end
local limit, lbad = limit_of(KEYS[7], ARGV[3], '1'); if not limit then return lbad end
local myfence = redis.call('HGET', KEYS[3], ARGV[1])
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {0, 0, false} end
redis.call('HLEN', KEYS[5])
local weighted = redis.call('HLEN', KEYS[6]) > 0
local function annotate()
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[6]); keep(KEYS[5], ttl) end
end
local function keepall()
  keep(KEYS[1], ttl); keep(KEYS[3], ttl)
  if n > 1 then keep(KEYS[6], ttl) end
end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keepall(); annotate()
  return {1, tonumber(myfence or '0')}
end
if n > limit then return invalid('asked for ' .. n .. ' permits, above the limit ' .. limit) end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do
    redis.call('HDEL', KEYS[3], dead[i]); redis.call('HDEL', KEYS[5], dead[i]); redis.call('HDEL', KEYS[6], dead[i])
  end
end
local used = redis.call('ZCARD', KEYS[1])
if weighted then
  local ws = redis.call('HGETALL', KEYS[6])
  for i = 1, #ws, 2 do
    if ws[i] == '~' then
      if tonumber(ws[i + 1]) <= now then redis.call('HDEL', KEYS[6], '~') end
    elseif redis.call('ZSCORE', KEYS[1], ws[i]) then used = used + tonumber(ws[i + 1]) - 1
    else redis.call('HDEL', KEYS[6], ws[i]) end
  end
end
if used + n <= limit then
  local f = raise_fence(KEYS[2], ARGV[7])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], f)
  if n > 1 then redis.call('HSET', KEYS[6], ARGV[1], n) end
  redis.call('PEXPIRE', KEYS[7], ARGV[7])
  keepall(); annotate()
  return {1, f}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local hint = tonumber(first[2]) - now
local wait = tonumber(ARGV[5])
if wait > 0 then
  if tonumber(redis.call('HGET', KEYS[6], '~') or '0') < now + wait then
    redis.call('HSET', KEYS[6], '~', now + wait)
  end
  keep(KEYS[6], wait)
  hint = math.min(hint, math.max(math.floor(wait / 3), 1))
end
return {0, hint, redis.call('HGET', KEYS[5], first[1])}
