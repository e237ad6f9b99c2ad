--@uses now_ms latch_count
-- TrySetCount of a Latch.
-- KEYS: 1 the latch, a hash: "count" -> the count; "initial" -> the count
-- set; "round" -> the id of the TrySetCount call that set it; "s:<id>" ->
-- server ms of each TrySetCount call that set it, "d:<id>" -> server ms of
-- each CountDown call that counted (kept for the current round, and for
-- $MARKER_MS ms across a re-arming, so that a late copy of such a call is
-- recognized).
-- ARGV: 1 the call's id (128 random bits, hex), 2 the count (an integer
-- of at least 1, checked by the caller), 3 the retention ms.
-- Reply: 1 set (now, or by an earlier copy of this very call), 0 a count
-- above zero is set.
--
-- A latch at zero (or whose key expired) is re-armed: ids older than
-- $MARKER_MS ms are forgotten, the count and round set, and the key lives
-- the retention from now.
--
-- The fast path is the setting of a latch whose key does not exist
-- (never set, or expired): nothing to forget, the count and round set as
-- the slow path sets them. Any other case goes on to the slow path.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'count', ARGV[2], 'initial', ARGV[2], 'round', ARGV[1], 's:' .. ARGV[1], now)
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
  local f, at = fields[i], tonumber(fields[i + 1])
  local p = string.sub(f, 1, 2)
  if (p == 's:' or p == 'd:') and (not at or at < now - $MARKER_MS) then
    redis.call('HDEL', KEYS[1], f)
  end
end
redis.call('HSET', KEYS[1], 'count', ARGV[2], 'initial', ARGV[2], 'round', ARGV[1], mine, now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
