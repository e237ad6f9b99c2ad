--@uses now_ms keep companion keep_companion
-- The extend of a Semaphore lease (and of an RWLock reader).
-- KEYS: 1 holders (zset token -> expiry, server ms), 2 holders' fences
-- (hash token -> fence): the keys that hold the token's entries, and so
-- exist whenever it holds (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 holders' annotations, 4 for a Semaphore
-- holders' weights, '' for an RWLock reader (both companions).
-- Reply: 1 extended, 0 not held.
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then
  local ttl = tonumber(ARGV[2])
  local weighted = companion('HEXISTS', ARGV[4], ARGV[1]) == 1 -- before the first write
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[2], ttl); keep_companion(ARGV[3], ttl)
  if weighted then keep_companion(ARGV[4], ttl) end
  return 1
end
return 0
