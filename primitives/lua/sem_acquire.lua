--@uses now_ms fence_of keep raise_fence
-- The acquire of a Semaphore.
-- KEYS: 1 holders (zset token -> expiry, server ms), 2 the fence counter,
-- 3 holders' fences (hash token -> fence), 4 the tokens that recently
-- finished (released or given back; see remember), 5 holders' annotations
-- (hash token -> annotation).
-- ARGV: 1 token, 2 ttl ms, 3 limit, 4 annotation ("" for none), 5 the
-- fence counter's retention ms (see raise_fence).
-- Reply: {1, fence} granted; {0, ms until the earliest holder expires,
-- that holder's annotation} held (0: a token that finished, refused).
--
-- Expired holders are swept first, by the server's clock. A token that
-- finished is refused: a late copy of an attempt whose acquisition ended.
local now = now_ms()
local ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local bad = fence_of(KEYS[2]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[3], ARGV[1])
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {0, 0, false} end
redis.call('HLEN', KEYS[5])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[4]); keep(KEYS[5], ttl) end
end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); annotate()
  return {1, tonumber(myfence or '0')}
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[3], dead[i]); redis.call('HDEL', KEYS[5], dead[i]) end
end
if redis.call('ZCARD', KEYS[1]) < limit then
  local f = raise_fence(KEYS[2], ARGV[5])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], f)
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); annotate()
  return {1, f}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now, redis.call('HGET', KEYS[5], first[1])}
