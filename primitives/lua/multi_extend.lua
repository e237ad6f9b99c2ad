--@uses companion owner
-- The extend of a MultiLock whose names live on one server: only when the
-- token holds every name.
-- KEYS: each name's lock: the keys that exist whenever the token holds
-- (see companion).
-- ARGV: 1 token, 2 ttl ms, then each name's holder's annotation (a
-- companion), in the order of KEYS.
-- Reply: 1 extended, 0 not held.
for i = 1, #KEYS do
  if owner(redis.call('GET', KEYS[i])) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
  companion('PEXPIRE', ARGV[i + 2], ARGV[2])
end
return 1
