--@uses now_ms renew_first companion keep_companion
--@keys holders
-- The extend of a Semaphore lease (and of an RWLock reader).
-- KEYS: 1 holders (as sem_acquire's, either form: see fence_member): the
-- key that holds the token's entries, and so exists whenever it holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 holders' annotations, 4 for a Semaphore
-- holders' weights, '' for an RWLock reader (both companions).
-- Reply: 1 extended, 0 not held.
--
-- A lone holder's expiry is its key's: its extend sets the key's to the
-- ttl (a PEXPIRE, which a server at maxmemory serves too).
local now = now_ms()
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if exp and exp >= 1e14 then
  local ttl = tonumber(ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ttl)
  keep_companion(ARGV[3], ttl)
  return 1
end
if exp and exp > now then
  local ttl = tonumber(ARGV[2])
  local weighted = companion('HEXISTS', ARGV[4], ARGV[1]) == 1 -- before the first write
  renew_first(KEYS[1], ttl) -- out of memory too
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep_companion(ARGV[3], ttl)
  if weighted then keep_companion(ARGV[4], ttl) end
  return 1
end
return 0
