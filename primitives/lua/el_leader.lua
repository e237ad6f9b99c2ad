-- The leader of an Election, as its seat says.
-- KEYS: 1 the lock, 8 the seat (as el_acquire; the others unused).
-- Reply: {value, fence, ms the seat has left}, or false when nobody leads
-- (or a lock handed over has not been seated).
local s = redis.call('HMGET', KEYS[8], 'v', 'f')
if redis.call('EXISTS', KEYS[1]) == 0 or not s[1] or not s[2] then return false end
return {s[1], tonumber(s[2]), redis.call('PTTL', KEYS[8])}
