--@uses clock lock_read flag_given_back hand_over dequeue remember
-- The give-back of a Mutex acquisition that ended without a grant (and of
-- a Redlock's on each instance), and the passing on of a name a waiting
-- MultiLock holds out of order: the token's queue entry leaves the queue,
-- and a lock it holds (a grant whose reply was lost or came too late, or a
-- hand-over it did not see) is passed on. At the end of an acquisition the
-- token is also remembered as given back, and the name's key flagged
-- (g, see lock_read) for the window, so that a late copy of its attempt
-- is refused: a free key gets a marker that lasts the window, a key held
-- by another token keeps its hold's end as a logical expiry (flag_given_back).
-- KEYS as mutex_acquire (a Redlock passes the first five).
-- ARGV: 1 token, 2 the release channel ('' for none, see mutex_release),
-- 3 hand ms (see mutex_release), 4 the queue entry ("" for none: a
-- TryLock, a Redlock), 5 "1" at the end of the acquisition.
-- Reply: 0.
local v = redis.call('GET', KEYS[1])
redis.call('ZCARD', KEYS[5]) -- type-checks the given-back tokens before any write
local now, us = clock()
local gone = ARGV[5] == '1' and now + $MARKER_MS or nil
if gone then remember(KEYS[5], ARGV[1], now) end
if ARGV[4] ~= '' then dequeue(KEYS[6], KEYS[7], ARGV[4]) end
local o, f, fl = lock_read(v, now)
if o == ARGV[1] then
  hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us, gone)
elseif gone then
  flag_given_back(KEYS[1], v, o, f, fl, gone, now, us)
end
return 0
