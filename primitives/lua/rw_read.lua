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
