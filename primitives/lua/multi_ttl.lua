-- The remaining time of a MultiLock lease whose names live on one server.
-- KEYS as multi_acquire.
-- ARGV: 1 token.
-- Reply: the smallest PTTL of its names in ms, or -3 when the token does
-- not hold every name.
local n = #KEYS / 7
local least = -1
for i = 0, n - 1 do
  if redis.call('GET', KEYS[i * 7 + 1]) ~= ARGV[1] then return -3 end
  local d = redis.call('PTTL', KEYS[i * 7 + 1])
  if least < 0 or d < least then least = d end
end
return least
