--@uses latch_count
--@keys latch
-- CountDown of a Latch.
-- KEYS: 1 the latch (as latch_set).
-- ARGV: kit's call header: 1 the call's id, 2 the latch's channel, 3 the
-- retention ms.
-- Reply: the count after the call.
--
-- A call whose id already counted (a copy the driver resent, a retry of a
-- call whose reply was lost) changes nothing: every CountDown call counts
-- at most once. At zero (or on a latch never set, or expired) it is a
-- no-op: the count never goes below zero. A count-down notes its id as of
-- the current round ("r": latch_set stamps it with the clock when it
-- re-arms the latch). The count-down that reaches zero wakes every waiter
-- (on the channel) and leaves the record at zero for $MARKER_MS ms, so
-- that late copies of the round's calls are still recognized; any other
-- count-down makes the key live the retention from now.
--
-- The fast path is a call on a latch whose count is an integer as Redis
-- writes one (latch_count's check, with no leading zero: HINCRBY refuses
-- one) and far from overflowing: its count and whether this id counted
-- read at once (HMGET); a count-down writes the new count and the id in
-- one HSET (the slow path's HINCRBY and HSET). Any other case goes on to
-- the slow path.
do
  local c = redis.call('HMGET', KEYS[1], 'count', 'd:' .. ARGV[1])
  if c[1] and (c[1] == '0' or (#c[1] <= 15 and string.find(c[1], '^[1-9]%d*$'))) then
    local n = tonumber(c[1])
    if n == 0 or c[2] then return n end
    n = n - 1
    redis.call('HSET', KEYS[1], 'count', n, 'd:' .. ARGV[1], 'r')
    if n == 0 then
      redis.call('PEXPIRE', KEYS[1], $MARKER_MS)
      redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
    else
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
    return n
  end
end
--@slow
local n, bad = latch_count(KEYS[1]); if bad then return bad end
local mine = 'd:' .. ARGV[1]
if n == 0 or redis.call('HEXISTS', KEYS[1], mine) == 1 then return n end
n = redis.call('HINCRBY', KEYS[1], 'count', -1)
redis.call('HSET', KEYS[1], mine, 'r')
if n == 0 then
  redis.call('PEXPIRE', KEYS[1], $MARKER_MS)
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return n
