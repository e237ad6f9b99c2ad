--@uses now_ms remember
-- The release of a Semaphore permit, and (ARGV[3] = "1") the give-back of
-- an acquisition that ended without a grant: the permit the token may
-- hold is freed, and the token remembered (a retried release succeeds, a
-- late attempt is refused).
-- KEYS as sem_acquire.
-- ARGV: 1 token, 2 the release channel, 3 "1" for a give-back.
-- Reply: 1 released (now or by an earlier try of this release), 0 not
-- held.
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
local done = redis.call('ZSCORE', KEYS[4], ARGV[1])
if exp then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  if tonumber(exp) > now then
    remember(KEYS[4], ARGV[1], now)
    redis.call('PUBLISH', ARGV[2], '$WAKE_ONE')
    return 1
  end
end
if ARGV[3] == '1' then remember(KEYS[4], ARGV[1], now) end
if done then return 1 end
return 0
