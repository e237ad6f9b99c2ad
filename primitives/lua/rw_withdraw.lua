--@uses now_ms remember
-- The give-back of an RWLock writer whose Lock ended without a grant: the
-- token is remembered (a late copy of its attempt is refused), its intent
-- is withdrawn, and the write lock is released if the token holds it (an
-- attempt whose reply was lost). Readers kept out by the intent are woken
-- when it was the last.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token, 2 the release channel.
-- Reply: 0.
local now = now_ms()
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[6])
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[7])
remember(KEYS[6], ARGV[1], now)
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and redis.call('ZCARD', KEYS[3]) == 0 then
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
end
if w == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
end
return 0
