--@uses companion keep_companion
-- The extend of an RWLock writer.
-- KEYS: 1 the writer (its token, PX ttl): the one key that exists whenever
-- the token holds (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 holders' annotations, 4 holders' fences
-- (both companions).
-- Reply: 1 extended, 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ttl)
  keep_companion(ARGV[3], ttl); keep_companion(ARGV[4], ttl)
  return 1
end
return 0
