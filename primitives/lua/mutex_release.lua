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
local v = redis.call('GET', KEYS[1])
if owner(v) == ARGV[1] then
  local now, us = clock()
  remember(KEYS[5], ARGV[1], now, held_fence(v), us) -- its first write type-checks the finished tokens
  hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us, true)
  return 1
end
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return 1 end
return 0
