--@uses hand_over
-- The release of a Mutex, and of each instance of a Redlock.
-- KEYS as mutex_acquire (a Redlock passes the first five).
-- ARGV: 1 token, 2 the release channel ('' for none: a Redlock's
-- instances but the first, where nobody listens), 3 how long a lock
-- handed over waits for its new holder to confirm, ms, 4 the fence
-- counter's retention ms.
-- Reply: 1 released (now, or by an earlier try of this release whose reply
-- was lost: the marker says so), 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  hand_over(1, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
  redis.call('SET', KEYS[3], ARGV[1], 'PX', $MARKER_MS)
  return 1
end
if redis.pcall('GET', KEYS[3]) == ARGV[1] then return 1 end
return 0
