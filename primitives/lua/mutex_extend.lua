-- The extend of a Mutex, and of each instance of a Redlock.
-- KEYS: 1 the lock, 2 the fence counter, 3 the release marker, 4 the
-- holder's annotation.
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return 1
end
return 0
