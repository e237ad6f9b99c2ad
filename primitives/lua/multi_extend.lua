--@uses companion clock lock_read put_lock
-- The extend of a MultiLock whose names live on one server: only when the
-- token holds every name.
-- KEYS: each name's lock: the keys that exist whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, then each name's holder's annotation (a
-- companion), in the order of KEYS.
-- Reply: 1 extended, 0 not held.
local now, us = clock()
local vals = {}
for i = 1, #KEYS do
  vals[i] = redis.call('GET', KEYS[i])
  if lock_read(vals[i], now) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  local o, f, fl = lock_read(vals[i], now)
  if f then put_lock(KEYS[i], o, f, fl, ARGV[2], now, us, vals[i]) else redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
  companion('PEXPIRE', ARGV[i + 2], ARGV[2])
end
return 1
