--@uses now_ms
-- The remaining time of a FairSemaphore permit.
-- KEYS: 1 liveness, 2 holders (as fair_acquire's 2 and 3).
-- ARGV: 1 token.
-- Reply: ms left, or -3 when the token does not hold a permit.
local now = now_ms()
local alive = redis.call('ZSCORE', KEYS[1], ARGV[1])
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 and alive and tonumber(alive) > now then
  return tonumber(alive) - now
end
return -3
