--@uses clock owner held_fence hand_over remember
-- The release of a Mutex, and of each instance of a Redlock.
-- KEYS as mutex_acquire (a Redlock passes the first five; the release
-- marker, KEYS[3], is not touched).
-- ARGV: 1 token, 2 the release channel ('' for none: a Redlock's
-- instances but the first, where nobody listens), 3 how long a lock
-- handed over waits for its new holder to confirm, ms, 4 the retention
-- ms (unused).
-- Reply: 1 released (now, or within the last $MARKER_MS ms by an earlier
-- try of this release whose reply was lost), 0 not held.
--
-- A release, handing the lock over or freeing it, remembers its token
-- among the name's finished tokens (KEYS[5], see remember), as a give-back
-- does: a retry of this release finds it there (released), whatever
-- happened to the name since, and a late copy of the token's attempt is
-- refused (mutex_attempt), so that it cannot grant the lock to nobody.
--
-- The fast path is the release of a lock nobody waits for (no queue, or
-- an empty one), written out as remember and hand_over do it.
local v = redis.call('GET', KEYS[1])
local sp = v and string.find(v, ' ', 1, true)
if sp and string.sub(v, 1, sp - 1) == ARGV[1] and (not KEYS[6] or redis.pcall('ZCARD', KEYS[6]) == 0) then
  local f = tonumber(string.sub(v, sp + 1))
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - $MARKER_MS) -- type-checks the finished tokens before any write
  if f and f >= us then
    redis.call('ZADD', KEYS[5], now, ARGV[1], f, '#')
    redis.call('PEXPIRE', KEYS[5], $MARKER_MS + math.ceil((f - us) / 1000))
  else
    redis.call('ZADD', KEYS[5], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[5], $MARKER_MS)
  end
  redis.call('DEL', KEYS[1], KEYS[4])
  if not KEYS[6] and ARGV[2] ~= '' then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE') end
  return 1
end
--@slow
if owner(v) == ARGV[1] then
  local now, us = clock()
  remember(KEYS[5], ARGV[1], now, held_fence(v), us) -- its first write type-checks the finished tokens
  hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us, true)
  return 1
end
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return 1 end
return 0
