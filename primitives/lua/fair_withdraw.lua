--@uses clock limit_of fair_hand_over remember keep_fence_of
-- The give-back of a FairSemaphore acquisition that ended without a
-- grant it saw: the token is remembered (a late copy of its attempt is
-- refused), its ticket leaves the queue, which may move the next tickets
-- up, and permits it holds (granted by an attempt whose reply was lost,
-- or handed over) are passed on.
-- With ARGV[7] = "0" the token is not remembered: the acquisition goes on
-- (a grant WithReplicaAck refused, see fairSemaphore.pass), and its next
-- attempt, with the same token, must not be taken for a late copy; it
-- takes a new ticket, as a Mutex waiter whose grant was passed on queues
-- again.
-- KEYS as fair_acquire.
-- ARGV as fair_release, and 7 "0" for a pass (absent for a give-back).
-- Reply: 0.
local now, us = clock()
local limit, lbad = limit_of(KEYS[8], ARGV[3], ARGV[6]); if not limit then return lbad end
redis.call('ZCARD', KEYS[1]); redis.call('ZCARD', KEYS[2]); redis.call('ZCARD', KEYS[4])
redis.call('HLEN', KEYS[3]); redis.call('HLEN', KEYS[5]); redis.call('HLEN', KEYS[6]); redis.call('HLEN', KEYS[7])
if ARGV[7] ~= '0' then remember(KEYS[4], ARGV[1], now) end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  local f = redis.call('HGET', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  keep_fence_of(KEYS[4], tonumber(f), us)
  fair_hand_over(now, us, limit, ARGV[2], tonumber(ARGV[4]))
end
return 0
