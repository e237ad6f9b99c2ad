--@uses clock owner held_fence keep_fence_of
--@keys holders writer waiting gone who
-- The release of an RWLock writer: everyone waiting is woken. It writes
-- only the writer and its annotation, and remembers nothing (see
-- sem_release); the writer's fence is kept beside the given-back tokens
-- while it is not behind the clock (keep_fence_of).
-- KEYS as rw_read.
-- ARGV: 1 token, 2 the release channel (a pass, see rwWriter.Pass, is a
-- release).
-- Reply: 1 released, 0 not held.
local v = redis.call('GET', KEYS[2])
redis.call('HLEN', KEYS[5]) -- type-checks before any write (the given-back tokens are written only by redis.pcall)
if v and owner(v) == ARGV[1] then
  local _, us = clock()
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], ARGV[1])
  keep_fence_of(KEYS[4], held_fence(v), us)
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
  return 1
end
return 0
