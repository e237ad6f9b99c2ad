--@uses clock lock_read
-- The leader of an Election, as its seat says.
-- KEYS: 1 the lock, 5 the given-back tokens, 8 the seat (as el_acquire;
-- the others unused).
-- Reply: {1, value, fence, ms the seat has left, c} while someone leads;
-- {0, c} when nobody does (or a lock handed over has not been seated). c
-- is at or above the fence of every leadership granted so far, and below
-- that of any granted later (the fence the lock's key keeps, held or a
-- free marker's, or the clock in µs less one): a message about one at or
-- below it is no news to whoever read this.
local s = redis.call('HMGET', KEYS[8], 'v', 'f')
local v = redis.call('GET', KEYS[1])
local now, us = clock()
local o, f = lock_read(v, now)
local c = math.max(f or 0, us - 1)
if not o or not s[1] or not s[2] then return {0, c} end
return {1, s[1], tonumber(s[2]), redis.call('PTTL', KEYS[8]), c}
