-- The remaining time of an RWLock writer.
-- KEYS: 1 the writer (its token, PX ttl).
-- ARGV: 1 token.
-- Reply: the writer's PTTL in ms, or -3 when the token is not the writer.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
return -3
