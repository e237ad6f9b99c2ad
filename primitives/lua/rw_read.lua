--@uses now_ms fence_of keep raise_fence foreign_lock
-- The acquire of an RWLock reader.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), 4 the fence
-- counter's retention ms (see raise_fence).
-- Reply: {1, fence} granted; {0, wait hint ms, the writer's annotation}
-- not (0: a token that finished, refused). A waiting writer's intent keeps
-- new readers out.
--
-- The fast path is the grant, without an annotation, to a token that
-- neither holds nor finished, where no writer, no writer's intent and no
-- annotation exists (one EXISTS for the three) and no reader expired: the
-- slow path's grant, written out, with one TIME for the clock and the
-- fence, and the fence counter raised from the GET that checks it
-- (raise_fence's INCR, in one script, is that value plus one). The first
-- write, the fence's HSET, type-checks the fences; when it fails, nothing
-- was written. Any other case goes on to the slow path.
if ARGV[3] == '' and redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[7]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local ttl = tonumber(ARGV[2])
  local readers = redis.call('ZCARD', KEYS[1])
  local free = true
  if readers > 0 then -- not the token's, and the earliest reader still live
    if redis.call('ZSCORE', KEYS[1], ARGV[1]) then free = false
    else free = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) > now end
  end
  local c = free and redis.call('GET', KEYS[4])
  if free and (not c or c == '0' or (#c <= 18 and string.find(c, '^%-?[1-9]%d*$'))) -- a counter, as is_counter
      and not redis.call('ZSCORE', KEYS[6], ARGV[1]) then
    local f = math.max((tonumber(c) or 0) + 1, us)
    if type(redis.pcall('HSET', KEYS[5], ARGV[1], f)) == 'number' then
      redis.call('SET', KEYS[4], string.format('%.0f', f), 'PX', ARGV[4])
      redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
      if readers == 0 or redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end -- a new key has no expiry
      if redis.call('PTTL', KEYS[5]) < ttl then redis.call('PEXPIRE', KEYS[5], ttl) end
      return {1, f}
    end
  end
end
--@slow
local now = now_ms()
local ttl = tonumber(ARGV[2])
local function annotate()
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[3]); keep(KEYS[7], ttl) end
end
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[7])
local bad = fence_of(KEYS[4]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return {0, 0, false} end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[5], ttl); annotate()
  return {1, tonumber(myfence or '0')}
end
if w then
  local pttl = redis.call('PTTL', KEYS[2])
  local foreign = foreign_lock(KEYS[2], pttl); if foreign then return foreign end
  return {0, pttl, redis.call('HGET', KEYS[7], w)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local waiting = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #waiting > 0 then return {0, tonumber(waiting[2]) - now} end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]); redis.call('HDEL', KEYS[7], dead[i]) end
end
local f = raise_fence(KEYS[4], ARGV[4])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], f)
keep(KEYS[1], ttl); keep(KEYS[5], ttl); annotate()
return {1, f}
