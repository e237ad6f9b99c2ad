--@uses clock held_fence
-- The leader of an Election, as its seat says.
-- KEYS: 1 the lock, 5 the finished tokens, 8 the seat (as el_acquire; the
-- others unused).
-- Reply: {1, value, fence, ms the seat has left, c} while someone leads;
-- {0, c} when nobody does (or a lock handed over has not been seated). c
-- is at or above the fence of every leadership granted so far, and below
-- that of any granted later (the lock's fence, a fence kept while ahead of
-- the clock, the clock in µs less one): a message about one at or below
-- it is no news to whoever read this.
local s = redis.call('HMGET', KEYS[8], 'v', 'f')
local v = redis.call('GET', KEYS[1])
local mark = redis.call('ZSCORE', KEYS[5], '#')
local _, us = clock()
local c = math.max(held_fence(v) or 0, tonumber(mark) or 0, us - 1)
if not v or not s[1] or not s[2] then return {0, c} end
return {1, s[1], tonumber(s[2]), redis.call('PTTL', KEYS[8]), c}
