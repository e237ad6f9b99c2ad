-- The extend of a MultiLock whose names live on one server: only when the
-- token holds every name.
-- KEYS as multi_acquire.
-- ARGV: 1 token, 2 ttl ms.
-- Reply: 1 extended, 0 not held.
local n = #KEYS / 7
for i = 0, n - 1 do
  if redis.call('GET', KEYS[i * 7 + 1]) ~= ARGV[1] then return 0 end
end
for i = 0, n - 1 do
  redis.call('PEXPIRE', KEYS[i * 7 + 1], ARGV[2])
  redis.call('PEXPIRE', KEYS[i * 7 + 4], ARGV[2])
end
return 1
