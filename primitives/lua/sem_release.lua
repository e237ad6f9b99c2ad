--@uses now_ms remember weight_of
-- The release of a Semaphore lease (all the permits it holds), and
-- (ARGV[3] = "1") the give-back of an acquisition that ended without a
-- grant: the permits the token may hold are freed, and the token
-- remembered (a retried release succeeds, a late attempt is refused).
-- With ARGV[3] = "0" the permits are freed but the token is not
-- remembered: the acquisition goes on (a grant WithReplicaAck refused,
-- see semaphore.pass), and its next attempt, with the same token, must
-- not be taken for a late copy.
-- KEYS as sem_acquire (the first six).
-- ARGV: 1 token, 2 the release channel, 3 "1" for a give-back, "0" for a
-- pass (absent for a release).
-- Reply: 1 released (now or by an earlier try of this release), 0 not
-- held.
--
-- The release message counts the permits freed, each waking one waiter;
-- while a waiter for several permits is marked (see sem_acquire) it wakes
-- every waiter.
--
-- The fast path is the release (or give-back) of a live holder where no
-- annotation and no weight exists (one EXISTS for both: one permit, no
-- waiter's mark), written out as the slow path and remember do it; the
-- fences are type-checked by a read, the finished tokens by the first
-- write (remember's trim). Any other case goes on to the slow path.
if ARGV[3] ~= '0' and redis.call('EXISTS', KEYS[5], KEYS[6]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if exp and tonumber(exp) > now then
    redis.call('HLEN', KEYS[3])
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - $MARKER_MS)
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[3], ARGV[1])
    redis.call('ZADD', KEYS[4], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[4], $MARKER_MS)
    redis.pcall('PUBLISH', ARGV[2], '1')
    return 1
  end
end
--@slow
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
local done = redis.call('ZSCORE', KEYS[4], ARGV[1])
local n = weight_of(KEYS[6], ARGV[1])
redis.call('HLEN', KEYS[3]); redis.call('HLEN', KEYS[5])
if exp then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  if tonumber(exp) > now then
    if ARGV[3] ~= '0' then remember(KEYS[4], ARGV[1], now) end
    local wake = tostring(n)
    if tonumber(redis.call('HGET', KEYS[6], '~') or '0') > now then wake = '$WAKE_ALL' end
    redis.pcall('PUBLISH', ARGV[2], wake)
    return 1
  end
end
if ARGV[3] == '1' then remember(KEYS[4], ARGV[1], now) end
if done then return 1 end
return 0
