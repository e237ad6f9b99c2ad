--@uses owner
-- The remaining time of a Mutex lease.
-- KEYS: 1 the lock.
-- ARGV: 1 token.
-- Reply: the lock's PTTL in ms, or -3 when the token does not hold it.
if owner(redis.call('GET', KEYS[1])) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
return -3
