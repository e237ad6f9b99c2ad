--@uses owner
--@keys writer
-- The remaining time of an RWLock writer.
-- KEYS: 1 the writer ("token fence", PX ttl).
-- ARGV: 1 token.
-- Reply: the writer's PTTL in ms, or -3 when the token is not the writer.
local v = redis.call('GET', KEYS[1])
if v and owner(v) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
return -3
