--@uses clock owner held_fence hand_over pass_seat remember
-- A leader's resignation (the release of its lease): the lock is handed to
-- the oldest live candidate, who is seated at once, or the seat is emptied;
-- the token is remembered among the finished ones (see mutex_release).
-- KEYS as el_acquire (the release marker, KEYS[3], is not touched).
-- ARGV: 1 token, 2 the release channel, 3 how long a lock handed over
-- waits for its new holder to confirm, ms, 4 the retention ms
-- (unused), 5 the observers' channel.
-- Reply: 1 released (now, or within the last $MARKER_MS ms by an earlier
-- try of this release), 0 not held.
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
local v = redis.call('GET', KEYS[1])
local done = redis.call('ZSCORE', KEYS[5], ARGV[1]) -- type-checks the finished tokens before any write
if owner(v) == ARGV[1] then
  local now, us = clock()
  remember(KEYS[5], ARGV[1], now, held_fence(v), us)
  local t, f, entry = hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us, true)
  pass_seat(t, f, entry, tonumber(ARGV[3]), ARGV[5])
  return 1
end
if done then return 1 end
return 0
