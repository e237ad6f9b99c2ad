--@uses clock keep foreign_lock owner held_fence lock_value next_fence keep_fence lone_of spread_lone top_fence drop_dead heartbeat
--@keys holders writer waiting gone who
-- The acquire of an RWLock writer.
-- KEYS as rw_read.
-- ARGV: kit's attempt header: 1 token, 2 ttl ms, 3 the waiter timeout ms,
-- which an intent lasts (0: do not queue, a TryLock), 4 annotation (""
-- for none), 5 the retention ms (unused).
-- Reply: {1, fence} granted; {0, wait hint ms, the annotation of the
-- holder waited for} not (0: a token given back, refused). A writer that
-- finds readers (or another writer) leaves its intent, which keeps new
-- readers out until it has had its turn. A grant's fence is the server's
-- clock in µs, above every fence the readers held (a writer is granted
-- once the last reader is gone: its fence is then kept while ahead, see
-- rw_read_release) and the one kept while ahead (see sem_acquire); it
-- lives in the writer's value, as a Mutex's in its lock.
local now, us = clock()
local ttl, intent = tonumber(ARGV[2]), tonumber(ARGV[3])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[4]); keep(KEYS[5], ttl) end
end
redis.call('ZCARD', KEYS[1])
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[5])
local g = redis.call('ZMSCORE', KEYS[4], ARGV[1], '#')
if g[1] then return {0, 0, false} end
if w and owner(w) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ttl)
  annotate()
  return {1, held_fence(w) or 0}
end
local function queue(hint, holder)
  if intent > 0 then
    redis.call('ZADD', KEYS[3], now + intent, ARGV[1])
    keep(KEYS[3], intent)
    hint = math.min(hint, heartbeat(intent))
  end
  return {0, math.max(hint, 1), redis.call('HGET', KEYS[5], holder)}
end
if w then
  local pttl = redis.call('PTTL', KEYS[2])
  local foreign = foreign_lock(KEYS[2], pttl); if foreign then return foreign end
  return queue(pttl, owner(w))
end
local ltok = lone_of(KEYS[1]) -- a lone reader is live (its key is)
if ltok then
  if intent > 0 then spread_lone(KEYS[1], now) end -- an intent is not written beside a lone reader
  return queue(redis.call('PTTL', KEYS[1]), ltok)
end
local top = top_fence(KEYS[1])
local dead = drop_dead(KEYS[1], now)
for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 and tonumber(first[2]) < 1e14 then return queue(tonumber(first[2]) - now, first[1]) end
local f = next_fence(us, g[2], top and top + 1)
redis.call('SET', KEYS[2], lock_value(ARGV[1], f), 'PX', ttl)
if f > us then keep_fence(KEYS[4], f, us) end
redis.call('ZREM', KEYS[3], ARGV[1])
annotate()
return {1, f}
