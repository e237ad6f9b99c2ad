--@uses now_ms
-- The remaining time of a Semaphore permit (and of an RWLock reader).
-- KEYS: 1 holders (zset token -> expiry, server ms).
-- ARGV: 1 token.
-- Reply: ms left, or -3 when the token does not hold a permit.
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then return tonumber(exp) - now end
return -3
