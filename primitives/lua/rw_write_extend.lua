--@uses owner companion keep_companion
--@keys writer
-- The extend of an RWLock writer.
-- KEYS: 1 the writer ("token fence", PX ttl): the one key that exists
-- whenever the token holds (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 holders' annotations (a companion).
-- Reply: 1 extended, 0 not held.
local v = redis.call('GET', KEYS[1])
if v and owner(v) == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ttl)
  keep_companion(ARGV[3], ttl)
  return 1
end
return 0
