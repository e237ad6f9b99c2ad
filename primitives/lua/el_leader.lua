-- The leader of an Election, as its seat says.
-- KEYS: 1 the lock, 2 the fence counter, 8 the seat (as el_acquire; the
-- others unused).
-- Reply: {1, value, fence, ms the seat has left, the fence counter} while
-- someone leads; {0, the fence counter} when nobody does (or a lock handed
-- over has not been seated). The counter (0 when absent) is the fence of
-- the latest leadership granted: a message about one at or below it is no
-- news to whoever read this.
local s = redis.call('HMGET', KEYS[8], 'v', 'f')
local c = redis.call('GET', KEYS[2])
if c and not tonumber(c) then return redis.error_reply('WRONGTYPE fence counter is not an integer') end
c = tonumber(c or '0')
if redis.call('EXISTS', KEYS[1]) == 0 or not s[1] or not s[2] then return {0, c} end
return {1, s[1], tonumber(s[2]), redis.call('PTTL', KEYS[8]), c}
