-- A latch's count (see blocks.lua).

--@ latch_count
-- latch_count reads the count of the latch at key (a hash, see
-- latch_set.lua) without writing: 0 when the key does not exist (never
-- set, or expired), else its count; nil and a WRONGTYPE error reply to
-- return when the key is not a latch's (another type raises WRONGTYPE in
-- HGET; a hash without a count, or with a count that is not a
-- non-negative integer, is someone else's hash).
local function latch_count(key)
  local c = redis.call('HGET', key, 'count')
  if not c then
    if redis.call('EXISTS', key) == 0 then return 0 end
    return nil, redis.error_reply('WRONGTYPE latch ' .. key .. ' is a hash without a count')
  end
  if not string.match(c, '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE latch count of ' .. key .. ' is not a non-negative integer')
  end
  return tonumber(c)
end
