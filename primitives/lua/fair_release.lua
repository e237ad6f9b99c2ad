--@uses clock limit_of fair_hand_over keep_fence_of
-- The release of a FairSemaphore lease (all the permits it holds): the
-- next live waiting tickets that fit are granted at once
-- (fair_hand_over). It writes only the entries of the token and those
-- grants, and remembers nothing (see sem_release); the token's fence is
-- kept beside the given-back tokens while it is not behind the clock
-- (keep_fence_of).
-- KEYS as fair_acquire.
-- ARGV: 1 token, 2 the release channel, 3 the constructor's limit, 4 how
-- long a permit handed over waits for its new holder to confirm, ms, 5 the
-- retention ms (unused), 6 "1" to grant by the stored limit (see
-- fair_acquire).
-- Reply: 1 released, 0 not held.
--
-- The fast path is the release of a live holder whose fence is behind the
-- clock, whose ticket is the only one in the queue, where no annotation,
-- inbox, weight or stored limit exists (one EXISTS for the four): its
-- entries taken out, as the slow path does (nobody to hand over to). Any
-- other case goes on to the slow path.
if redis.call('EXISTS', KEYS[5], KEYS[6], KEYS[7], KEYS[8]) == 0 then
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = tonumber(redis.call('HGET', KEYS[3], ARGV[1]))
  local alive = false
  if f and f < us then alive = redis.call('ZSCORE', KEYS[2], ARGV[1]) end
  if alive and tonumber(alive) > math.floor(us / 1000) and redis.call('ZCARD', KEYS[1]) == 1 then
    redis.call('HDEL', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('ZREM', KEYS[2], ARGV[1])
    return 1
  end
end
--@slow
local now, us = clock()
local limit, lbad = limit_of(KEYS[8], ARGV[3], ARGV[6]); if not limit then return lbad end
redis.call('HLEN', KEYS[7])
local f = redis.call('HGET', KEYS[3], ARGV[1])
if f then
  local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
  redis.call('ZCARD', KEYS[1])
  redis.call('HLEN', KEYS[5]); redis.call('HLEN', KEYS[6])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  keep_fence_of(KEYS[4], tonumber(f), us)
  fair_hand_over(now, us, limit, ARGV[2], tonumber(ARGV[4]))
  if not alive or tonumber(alive) <= now then return 0 end
  return 1
end
return 0
