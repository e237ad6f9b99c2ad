--@uses now_ms keep
-- The extend of a FairSemaphore permit.
-- KEYS as fair_acquire.
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
local now = now_ms()
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 and alive and tonumber(alive) > now then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[2], ttl); keep(KEYS[3], ttl); keep(KEYS[5], ttl); keep(KEYS[7], ttl)
  if redis.call('HEXISTS', KEYS[9], ARGV[1]) == 1 then keep(KEYS[9], ttl) end
  return 1
end
return 0
