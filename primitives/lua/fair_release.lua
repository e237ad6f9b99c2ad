--@uses now_ms fence_of limit_of fair_hand_over remember
-- The release of a FairSemaphore lease (all the permits it holds): the
-- next live waiting tickets that fit are granted at once
-- (fair_hand_over).
-- KEYS as fair_acquire.
-- ARGV: 1 token, 2 the release channel, 3 the constructor's limit, 4 how
-- long a permit handed over waits for its new holder to confirm, ms, 5 the
-- fence counter's retention ms, 6 "1" to grant by the stored limit (see
-- fair_acquire).
-- Reply: 1 released (now or by an earlier try of this release), 0 not
-- held.
local now = now_ms()
local bad = fence_of(KEYS[4]); if bad then return bad end
local limit, lbad = limit_of(KEYS[10], ARGV[3], ARGV[6]); if not limit then return lbad end
redis.call('HLEN', KEYS[9])
local f = redis.call('HGET', KEYS[5], ARGV[1])
if f then
  local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
  redis.call('ZCARD', KEYS[1]); redis.call('ZCARD', KEYS[6])
  redis.call('HLEN', KEYS[7]); redis.call('HLEN', KEYS[8])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('HDEL', KEYS[9], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  fair_hand_over(now, limit, ARGV[2], tonumber(ARGV[4]), ARGV[5])
  if not alive or tonumber(alive) <= now then return 0 end
  remember(KEYS[6], ARGV[1], now)
  return 1
end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 1 end
return 0
