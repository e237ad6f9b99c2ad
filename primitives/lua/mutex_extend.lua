--@uses companion clock lock_read put_lock
-- The extend of a Mutex, and of each instance of a Redlock.
-- KEYS: 1 the lock: the one key that exists whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, 3 the holder's annotation (a companion).
-- Reply: 1 extended, 0 not held.
--
-- The fast path is the extend of a lock whose value has no flags.
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^(%S+) %d+$') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] and ARGV[3] ~= '' then redis.pcall('PEXPIRE', ARGV[3], ARGV[2]) end -- companion, written out (PEXPIRE refuses no type)
  return 1
end
--@slow
local now, us = clock()
local o, f, fl = lock_read(v, now)
if o ~= ARGV[1] then return 0 end
if f then put_lock(KEYS[1], o, f, fl, ARGV[2], now, us, v) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
companion('PEXPIRE', ARGV[3], ARGV[2])
return 1
