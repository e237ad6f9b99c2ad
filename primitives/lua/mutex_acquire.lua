--@uses mutex_attempt
-- The acquire of a Mutex (and ReentrantMutex), and of each instance of a
-- Redlock (see mutex_attempt).
-- KEYS: 1 the lock ("token fence", PX ttl), 2 and 3 reserved (the fence
-- counter and release marker of earlier versions), 4 the holder's annotation, 5 the tokens given
-- back (zset token -> ms, see remember), and for a Mutex's own waiting
-- Lock 6 the wait queue (zset entry -> place) and 7 the waiters' liveness
-- (zset entry -> expiry, server ms).
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), and for a waiting
-- Lock 4 the waiter timeout ms and 5 its queue entry ("token inbox"), or
-- for a Redlock's attempt 4 the least fence a grant takes (see
-- mutex_attempt); last, the retention ms (unused: no fence counter, see
-- keep_fence).
-- Reply: {1, fence} granted; {0, wait hint ms, the holder's annotation or
-- false} held (a hint of 0: unknown), and for a waiting Lock the fence
-- fence as a fourth element (see mutex_attempt).
--
-- The fast path is mutex_attempt's grant of a free lock without an
-- annotation, written out; any other case goes on to mutex_attempt (told
-- when the fast path found the lock held).
local waiting = #ARGV == 6
local least = #ARGV == 5 and ARGV[4]
local tried = false
if ARGV[3] == '' then
  local g = redis.call('ZMSCORE', KEYS[5], ARGV[1], '#')
  if g[1] then return {0, 0, false} end
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = math.max(us, (tonumber(g[2]) or -1) + 1, tonumber(least) or 0)
  if redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then
    if f > us then
      redis.call('ZADD', KEYS[5], f, '#')
      redis.call('PEXPIRE', KEYS[5], $MARKER_MS + math.ceil((f - us) / 1000))
    end
    if waiting and redis.pcall('ZREM', KEYS[6], ARGV[5]) == 1 then redis.pcall('ZREM', KEYS[7], ARGV[5]) end
    return {1, f}
  end
  tried = true
end
--@slow
return mutex_attempt(ARGV[1], ARGV[2], ARGV[3], waiting and ARGV[4], waiting and ARGV[5], least, tried)
