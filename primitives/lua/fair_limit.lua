--@uses clock fair_hand_over
-- SetLimit of a FairSemaphore: the limit every client of the name grants
-- by from now on, kept for the retention after the last grant or SetLimit
-- (each grant refreshes it). Waiting tickets that now fit are granted at
-- once (fair_hand_over), and every waiter is woken to try again (one now
-- heavier than the limit learns so and drops out).
-- KEYS as fair_acquire.
-- ARGV: 1 the limit, 2 the release channel, 3 how long a permit handed
-- over waits for its new holder to confirm, ms, 4 the retention ms.
-- Reply: the limit it replaced (0 when none was stored).
local old = redis.call('GET', KEYS[8])
if old and not tonumber(old) then
  return redis.error_reply('WRONGTYPE stored limit ' .. KEYS[8] .. ' is not an integer')
end
redis.call('HLEN', KEYS[3]); redis.call('HLEN', KEYS[5]); redis.call('HLEN', KEYS[6]); redis.call('HLEN', KEYS[7])
redis.call('ZCARD', KEYS[1]); redis.call('ZCARD', KEYS[2]); redis.call('ZCARD', KEYS[4])
redis.call('SET', KEYS[8], ARGV[1], 'PX', ARGV[4])
local now, us = clock()
fair_hand_over(now, us, tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]))
redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
return tonumber(old or '0')
