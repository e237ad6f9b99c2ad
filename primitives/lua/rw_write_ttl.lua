-- The remaining time of an RWLock writer.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token.
-- Reply: the writer's PTTL in ms, or -3 when the token is not the writer.
if redis.call('GET', KEYS[2]) == ARGV[1] then return redis.call('PTTL', KEYS[2]) end
return -3
