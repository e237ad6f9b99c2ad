--@uses keep
-- The extend of an RWLock writer.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  keep(KEYS[7], tonumber(ARGV[2]))
  return 1
end
return 0
