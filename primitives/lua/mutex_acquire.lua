--@uses enqueue dequeue raise_fence
-- The acquire of a Mutex (and ReentrantMutex), and of each instance of a
-- Redlock.
-- KEYS: 1 the lock (the holder's token, PX ttl), 2 the fence counter,
-- 3 the release marker, 4 the holder's annotation, 5 the tokens given
-- back (zset token -> ms, see remember), and for a Mutex's own waiting
-- Lock 6 the wait queue (zset entry -> place) and 7 the waiters' liveness
-- (zset entry -> expiry, server ms).
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), and for a waiting
-- Lock 4 the waiter timeout ms and 5 its queue entry ("token inbox"); last,
-- the fence counter's retention ms (see raise_fence).
-- Reply: {1, fence} granted; {0, wait hint ms, the holder's annotation or
-- false} held (a hint of 0: unknown).
--
-- A token given back is refused: this is a late copy of an attempt whose
-- acquisition has ended. A waiting Lock that finds the lock held queues,
-- or heartbeats its place. Whenever it is granted, its entry leaves the
-- queue: also when an earlier try of this attempt queued it and a resent
-- copy wins the lock. Finding its own token means an earlier try of this
-- attempt got through (its reply was lost), or a release handed the lock
-- over: granted, with the TTL refreshed.
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return {0, 0, false} end
local waiting = #ARGV == 6
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f, bad = raise_fence(KEYS[2], ARGV[#ARGV])
  if not f then
    redis.call('DEL', KEYS[1])
    return redis.error_reply('WRONGTYPE fence counter: ' .. tostring(bad.err))
  end
  if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
  if waiting then dequeue(KEYS[6], KEYS[7], ARGV[5]) end
  return {1, f}
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  local f = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
  if waiting then dequeue(KEYS[6], KEYS[7], ARGV[5]) end
  return {1, f}
end
local hint = redis.call('PTTL', KEYS[1])
local who = redis.call('GET', KEYS[4])
if waiting then
  local wait = tonumber(ARGV[4])
  enqueue(KEYS[6], KEYS[7], ARGV[5], wait)
  hint = math.min(hint, math.max(math.floor(wait / 3), 1))
end
return {0, hint, who}
