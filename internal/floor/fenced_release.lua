-- The release of the least a fenced, queue-aware lock costs: the owner
-- checked against the value's token, the wait queue's length read (a
-- release hands the lock to a waiter when there is one), and the lock
-- deleted. KEYS: 1 the lock key, 2 the wait queue (a zset). ARGV: 1 the
-- token. Reply: 1 if released, else 0.
local v = redis.call('GET', KEYS[1])
local sp = v and string.find(v, ' ', 1, true)
if not sp or string.sub(v, 1, sp - 1) ~= ARGV[1] then return 0 end
if redis.pcall('ZCARD', KEYS[2]) ~= 0 then return 0 end
return redis.call('DEL', KEYS[1])
