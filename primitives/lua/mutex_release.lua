--@uses hand_over mark_released was_released
-- The release of a Mutex, and of each instance of a Redlock.
-- KEYS as mutex_acquire (a Redlock passes the first five).
-- ARGV: 1 token, 2 the release channel ('' for none: a Redlock's
-- instances but the first, where nobody listens), 3 how long a lock
-- handed over waits for its new holder to confirm, ms, 4 the fence
-- counter's retention ms.
-- Reply: 1 released (now, or within the last $MARKER_MS ms by an earlier
-- try of this release whose reply was lost: its own marker says so, see
-- mark_released), 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  hand_over(1, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
  mark_released(KEYS[3], ARGV[1])
  return 1
end
if was_released(KEYS[3], ARGV[1]) then return 1 end
return 0
