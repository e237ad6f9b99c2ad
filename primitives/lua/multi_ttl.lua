--@uses owner
-- The remaining time of a MultiLock lease whose names live on one server.
-- KEYS: each name's lock (see multi_extend).
-- ARGV: 1 token.
-- Reply: the smallest PTTL of its names in ms, or -3 when the token does
-- not hold every name.
local least = -1
for i = 1, #KEYS do
  if owner(redis.call('GET', KEYS[i])) ~= ARGV[1] then return -3 end
  local d = redis.call('PTTL', KEYS[i])
  if least < 0 or d < least then least = d end
end
return least
