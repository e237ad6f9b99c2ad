-- top: reads, at one instant, what latchctl top shows of many names: a
-- few keys per name and kind, each by the op of the same index in ARGV.
-- KEYS: the keys. ARGV: one op per key:
--   S: a string's value and PTTL ({value, pttl}; {false, -2} without one)
--   Z: a sorted set's members and scores (flat: member, score, ...)
--   H: a hash's fields and values (flat)
--   N: a sorted set's members scored above now, the server's ms (ZCOUNT)
--   C: a sorted set's size (ZCARD)
-- A key of another type reads as absent: redis.pcall, never an error.
-- Reply: {now in server ms, then one entry per key}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now}
local function ok(r, empty)
  if type(r) == 'table' and r.err then return empty end
  return r
end
for i = 1, #KEYS do
  local k, op = KEYS[i], ARGV[i]
  local r
  if op == 'S' then
    local v = ok(redis.pcall('GET', k), false)
    r = {v, v and redis.call('PTTL', k) or -2}
  elseif op == 'Z' then r = ok(redis.pcall('ZRANGE', k, 0, -1, 'WITHSCORES'), {})
  elseif op == 'H' then r = ok(redis.pcall('HGETALL', k), {})
  elseif op == 'N' then r = ok(redis.pcall('ZCOUNT', k, '(' .. now, '+inf'), 0)
  elseif op == 'C' then r = ok(redis.pcall('ZCARD', k), 0)
  end
  out[i + 1] = r
end
return out
