-- The types of KEYS, read to name the key of another type a script met
-- (see keyErr in wrongtype.go): it runs on the error path only and writes
-- nothing.
-- KEYS: any keys of one primitive.
-- Reply: one type name per key ("none" when absent).
local t = {}
for i, k in ipairs(KEYS) do
  local r = redis.call('TYPE', k)
  if type(r) == 'table' then r = r.ok end
  t[i] = r
end
return t
