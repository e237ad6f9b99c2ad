--@uses companion clock lock_read put_lock
-- The extend of a leader's lease: its lock, annotation and seat.
-- KEYS: 1 the lock: the one key that exists whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 the holder's annotation, 4 the seat (both
-- companions).
-- Reply: 1 extended, 0 not held.
local v = redis.call('GET', KEYS[1])
local now, us = clock()
local o, f, fl = lock_read(v, now)
if o ~= ARGV[1] then return 0 end
if f then put_lock(KEYS[1], o, f, fl, ARGV[2], now, us, v) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
companion('PEXPIRE', ARGV[3], ARGV[2])
companion('PEXPIRE', ARGV[4], ARGV[2])
return 1
