--@uses companion owner
-- The extend of a Mutex, and of each instance of a Redlock.
-- KEYS: 1 the lock: the one key that exists whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 the holder's annotation (a companion).
-- Reply: 1 extended, 0 not held.
if owner(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  companion('PEXPIRE', ARGV[3], ARGV[2])
  return 1
end
return 0
