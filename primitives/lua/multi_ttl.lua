--@uses clock lock_read
-- The remaining time of a MultiLock lease whose names live on one server.
-- KEYS: each name's lock (see multi_extend).
-- ARGV: 1 token.
-- Reply: the least time the token holds its names for, ms, or -3 when it
-- does not hold every name.
local now = clock()
local least = -1
for i = 1, #KEYS do
  local o, _, fl = lock_read(redis.call('GET', KEYS[i]), now)
  if o ~= ARGV[1] then return -3 end
  local d = fl.till and fl.till - now or redis.call('PTTL', KEYS[i])
  if least < 0 or d < least then least = d end
end
return least
