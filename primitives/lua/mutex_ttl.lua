--@uses clock lock_read
-- The remaining time of a Mutex lease.
-- KEYS: 1 the lock.
-- ARGV: 1 token.
-- Reply: the time the token holds the lock for, ms, or -3 when it does
-- not hold it.
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^(%S+) %d+$') == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
--@slow
local now = clock()
local o, _, fl = lock_read(v, now)
if o ~= ARGV[1] then return -3 end
if fl.till then return fl.till - now end
return redis.call('PTTL', KEYS[1])
