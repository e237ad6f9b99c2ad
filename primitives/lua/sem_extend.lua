--@uses now_ms keep
-- The extend of a Semaphore lease (and of an RWLock reader, whose
-- readers, fences and annotations are given as KEYS 1, 3 and 5).
-- KEYS: 1 holders, 3 holders' fences, 5 holders' annotations, and for a
-- Semaphore 6 holders' weights (as sem_acquire).
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); keep(KEYS[5], ttl)
  if KEYS[6] and redis.call('HEXISTS', KEYS[6], ARGV[1]) == 1 then keep(KEYS[6], ttl) end
  return 1
end
return 0
