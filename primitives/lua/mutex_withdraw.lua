--@uses clock owner hand_over dequeue remember
-- The give-back of a Mutex acquisition that ended without a grant (and of
-- a Redlock's on each instance), and the passing on of a name a waiting
-- MultiLock holds out of order: the token's queue entry leaves the queue,
-- and a lock it holds (a grant whose reply was lost or came too late, or a
-- hand-over it did not see) is passed on. At the end of an acquisition the
-- token is also remembered as given back, so that a late copy of its
-- attempt is refused.
-- KEYS as mutex_acquire (a Redlock passes the first five).
-- ARGV: 1 token, 2 the release channel ('' for none, see mutex_release),
-- 3 hand ms (see mutex_release), 4 the queue entry ("" for none: a
-- TryLock, a Redlock), 5 "1" at the end of the acquisition, 6 the retention
-- ms (unused).
-- Reply: 0.
local v = redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[5])
local now, us = clock()
if ARGV[5] == '1' then remember(KEYS[5], ARGV[1], now) end
if ARGV[4] ~= '' then dequeue(KEYS[6], KEYS[7], ARGV[4]) end
if owner(v) == ARGV[1] then hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us) end
return 0
