-- snapshot: reads every key in KEYS at one instant, for inspect.
-- KEYS: the keys to read. ARGV: none.
-- Reply: {now in server ms, then per key {TYPE, PTTL, contents}}, where the
-- contents are a string's value, a sorted set's members and scores, a hash's
-- fields and values, or nothing for other types.
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 1, #KEYS do
  local k = KEYS[i]
  local typ = redis.call('TYPE', k).ok
  local v = {}
  if typ == 'string' then v = {redis.call('GET', k)}
  elseif typ == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif typ == 'hash' then v = redis.call('HGETALL', k) end
  out[i + 1] = {typ, redis.call('PTTL', k), v}
end
return out
