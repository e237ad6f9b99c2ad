--@uses now_ms keep renew_first companion keep_companion
-- The extend of a FairSemaphore permit.
-- KEYS: 1 queue, 2 liveness, 3 holders (as fair_acquire's 1, 2 and 3): the
-- keys that hold the token's entries, and so exist whenever it holds (see
-- companion).
-- ARGV: 1 token, 2 ttl ms, 3 holders' annotations, 4 tickets' weights
-- (both companions).
-- Reply: 1 extended, 0 not held.
local now = now_ms()
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 and alive and tonumber(alive) > now then
  local ttl = tonumber(ARGV[2])
  local weighted = companion('HEXISTS', ARGV[4], ARGV[1]) == 1 -- before the first write
  renew_first(KEYS[2], ttl) -- out of memory too
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[3], ttl)
  keep_companion(ARGV[3], ttl)
  if weighted then keep_companion(ARGV[4], ttl) end
  return 1
end
return 0
