--@uses hand_over dequeue
-- The give-back of a Mutex acquisition that ended without a grant: its
-- queue entry leaves the queue, and a lock its token holds (a grant whose
-- reply was lost or came too late, or a hand-over it did not see) is
-- passed on.
-- KEYS as mutex_acquire.
-- ARGV: 1 token, 2 the release channel, 3 hand ms (see mutex_release),
-- 4 the queue entry ("" for none: a TryLock).
-- Reply: 0.
local mine = redis.call('GET', KEYS[1]) == ARGV[1]
if ARGV[4] ~= '' then dequeue(KEYS[5], KEYS[6], ARGV[4]) end
if mine then hand_over(1, ARGV[1], ARGV[2], ARGV[3]) end
return 0
