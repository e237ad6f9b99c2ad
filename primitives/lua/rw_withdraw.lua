--@uses clock remember owner held_fence keep_fence_of
--@keys holders writer waiting gone who
-- The give-back of an RWLock writer whose Lock ended without a grant it
-- saw: the token is remembered (a late copy of its attempt is refused),
-- its intent is withdrawn, and the write lock is released if the token
-- holds it (an attempt whose reply was lost). Readers kept out by the
-- intent are woken when it was the last.
-- KEYS as rw_read.
-- ARGV: 1 token, 2 the release channel.
-- Reply: 0.
local now, us = clock()
local w = redis.call('GET', KEYS[2])
redis.call('ZSCORE', KEYS[4], '#')
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[5])
remember(KEYS[4], ARGV[1], now)
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and redis.call('ZCARD', KEYS[3]) == 0 then
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
end
if w and owner(w) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], ARGV[1])
  keep_fence_of(KEYS[4], held_fence(w), us)
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
end
return 0
