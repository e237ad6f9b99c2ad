--@uses now_ms fence_of limit_of fair_hand_over remember
-- The give-back of a FairSemaphore acquisition that ended without a
-- grant: the token is remembered (a late copy of its attempt is refused),
-- its ticket leaves the queue, which may move the next tickets up, and
-- permits it holds (granted by an attempt whose reply was lost, or handed
-- over) are passed on.
-- With ARGV[7] = "0" the token is not remembered: the acquisition goes on
-- (a grant WithReplicaAck refused, see fairSemaphore.pass), and its next
-- attempt, with the same token, must not be taken for a late copy; it
-- takes a new ticket, as a Mutex waiter whose grant was passed on queues
-- again.
-- KEYS as fair_acquire.
-- ARGV as fair_release, and 7 "0" for a pass (absent for a give-back).
-- Reply: 0.
local now = now_ms()
local bad = fence_of(KEYS[4]); if bad then return bad end
local limit, lbad = limit_of(KEYS[10], ARGV[3], ARGV[6]); if not limit then return lbad end
redis.call('ZCARD', KEYS[1]); redis.call('ZCARD', KEYS[2]); redis.call('ZCARD', KEYS[6])
redis.call('HLEN', KEYS[5]); redis.call('HLEN', KEYS[7]); redis.call('HLEN', KEYS[8]); redis.call('HLEN', KEYS[9])
if ARGV[7] ~= '0' then remember(KEYS[6], ARGV[1], now) end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('HDEL', KEYS[9], ARGV[1])
  fair_hand_over(now, limit, ARGV[2], tonumber(ARGV[4]), ARGV[5])
end
return 0
