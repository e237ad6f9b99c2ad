--@uses now_ms
--@keys log gone
-- A take of a rate limiter: at most limit takes of a name in any window of
-- window ms, counted in a log of takes scored by the server's clock.
-- ARGV: the attempt header (1 token, 2 ttl ms, 3 waiter timeout ms, 4
-- annotation, 5 retention ms: unused but the token; a waiting take keeps no
-- place), 6 limit, 7 window ms.
-- Reply: {1, takes in the window} taken (now, or by an earlier try of this
-- take whose reply was lost); {0, ms until the window has room, false}
-- full; {0, 0, false} a token given back (a late copy of a take that ended
-- without it), which takes nothing. Both keys are read before any write.
local tok, limit, window = ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[7])
if redis.call('ZSCORE', KEYS[1], tok) then return {1, 0} end
if redis.call('ZSCORE', KEYS[2], tok) then return {0, 0, false} end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n < limit then
  redis.call('ZADD', KEYS[1], now, tok)
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, n + 1}
end
-- Full: room comes when the take n - limit + 1 from the oldest leaves.
local t = redis.call('ZRANGE', KEYS[1], n - limit, n - limit, 'WITHSCORES')
return {0, math.max(1, tonumber(t[2]) + window - now), false}
