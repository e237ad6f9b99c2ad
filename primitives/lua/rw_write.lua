--@uses now_ms fence_of keep raise_fence foreign_lock
-- The acquire of an RWLock writer.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token, 2 ttl ms, 3 intent ms (0: do not queue, a TryLock),
-- 4 annotation ("" for none), 5 the fence counter's retention ms (see
-- raise_fence).
-- Reply: {1, fence} granted; {0, wait hint ms, the annotation of the
-- holder waited for} not (0: a token that finished, refused). A writer
-- that finds readers (or another writer) leaves its intent, which keeps
-- new readers out until it has had its turn.
local now = now_ms()
local ttl, intent = tonumber(ARGV[2]), tonumber(ARGV[3])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[4]); keep(KEYS[7], ttl) end
end
redis.call('ZCARD', KEYS[1])
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[7])
local bad = fence_of(KEYS[4]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return {0, 0, false} end
if w == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ttl)
  annotate()
  return {1, tonumber(myfence or '0')}
end
local function queue(hint, holder)
  if intent > 0 then
    redis.call('ZADD', KEYS[3], now + intent, ARGV[1])
    keep(KEYS[3], intent)
    hint = math.min(hint, math.floor(intent / 3))
  end
  return {0, math.max(hint, 1), redis.call('HGET', KEYS[7], holder)}
end
if w then
  local pttl = redis.call('PTTL', KEYS[2])
  local foreign = foreign_lock(KEYS[2], pttl); if foreign then return foreign end
  return queue(pttl, w)
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]); redis.call('HDEL', KEYS[7], dead[i]) end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then return queue(tonumber(first[2]) - now, first[1]) end
local f = raise_fence(KEYS[4], ARGV[5])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], f)
keep(KEYS[5], ttl); annotate()
return {1, f}
