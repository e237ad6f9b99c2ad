--@uses now_ms latch_count
--@keys latch
-- TrySetCount of a Latch.
-- KEYS: 1 the latch, a hash: "count" -> the count; "initial" -> the count
-- set; "round" -> the id of the TrySetCount call that set it; "s:<id>" ->
-- each TrySetCount call that set it, "d:<id>" -> each CountDown call that
-- counted: "r" while their round is the latch's, then the server ms of the
-- re-arming that ended it (kept $MARKER_MS ms from then, so that a late
-- copy of such a call is recognized).
-- ARGV: kit's call header (1 the call's id, 2 the latch's channel,
-- unused, 3 the retention ms), 4 the count (an integer of at least 1,
-- checked by the caller).
-- Reply: 1 set (now, or by an earlier copy of this very call), 0 a count
-- above zero is set.
--
-- A latch at zero (or whose key expired) is re-armed: the ids of the round
-- that ended are stamped with the clock, those stamped more than
-- $MARKER_MS ms ago are forgotten, the count and round set, and the key
-- lives the retention from now. No call but a re-arming reads the clock.
--
-- The fast path is the setting of a latch whose key does not exist
-- (never set, or expired): nothing to stamp or forget, the count and round
-- set as the slow path sets them. Any other case goes on to the slow path.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'count', ARGV[4], 'initial', ARGV[4], 'round', ARGV[1], 's:' .. ARGV[1], 'r')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
--@slow
local n, bad = latch_count(KEYS[1]); if bad then return bad end
local mine = 's:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], mine) == 1 then return 1 end
if n > 0 then return 0 end
local now = now_ms()
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f, at = fields[i], fields[i + 1]
  local p = string.sub(f, 1, 2)
  if p == 's:' or p == 'd:' then
    if at == 'r' then
      redis.call('HSET', KEYS[1], f, now)
    elseif not tonumber(at) or tonumber(at) < now - $MARKER_MS then
      redis.call('HDEL', KEYS[1], f)
    end
  end
end
redis.call('HSET', KEYS[1], 'count', ARGV[4], 'initial', ARGV[4], 'round', ARGV[1], mine, 'r')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
