--@uses now_ms
--@keys holders
-- The remaining time of a Semaphore permit (and of an RWLock reader).
-- KEYS: 1 holders (as sem_acquire's, either form: see fence_member).
-- ARGV: 1 token.
-- Reply: ms left, or -3 when the token does not hold a permit.
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp and exp >= 1e14 then return redis.call('PTTL', KEYS[1]) end -- a lone holder: its key's
if exp and exp > now then return exp - now end
return -3
