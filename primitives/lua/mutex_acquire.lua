--@uses mutex_attempt
-- The acquire of a Mutex (and ReentrantMutex), and of each instance of a
-- Redlock (see mutex_attempt).
-- KEYS: 1 the lock ("token fence", PX ttl), 2 and 3 reserved (the fence
-- counter and release marker of earlier versions), 4 the holder's annotation, 5 the tokens given
-- back (zset token -> ms, see remember), and for a Mutex's own waiting
-- Lock 6 the wait queue (zset entry -> place) and 7 the waiters' liveness
-- (zset entry -> expiry, server ms).
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), and for a waiting
-- Lock 4 the waiter timeout ms and 5 its queue entry ("token inbox"), or
-- for a Redlock's attempt 4 the least fence a grant takes (see
-- mutex_attempt); last, the retention ms (unused: no fence counter, see
-- keep_fence).
-- Reply: {1, fence} granted; {0, wait hint ms, the holder's annotation or
-- false} held (a hint of 0: unknown), and for a waiting Lock the fence
-- fence as a fourth element (see mutex_attempt).
local waiting = #ARGV == 6
return mutex_attempt(ARGV[1], ARGV[2], ARGV[3], waiting and ARGV[4], waiting and ARGV[5], #ARGV == 5 and ARGV[4])
