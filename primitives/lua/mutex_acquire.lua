--@uses mutex_attempt
-- The acquire of a Mutex (and ReentrantMutex), and of each instance of a
-- Redlock (see mutex_attempt).
-- KEYS: 1 the lock ("token fence[ flags]", or a free marker "~ fence[
-- flags]": see lock_read), 2 and 3 reserved (unused: they keep the others'
-- places), 4 the holder's annotation, 5 the tokens given back (zset token
-- -> ms, see remember), and for a Mutex 6 the wait queue (zset entry ->
-- place) and 7 the waiters' liveness (zset entry -> expiry, server ms).
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), and for a waiting
-- Lock 4 the waiter timeout ms, 5 its queue entry ("token inbox") and 6
-- "1" when an earlier attempt of the acquisition may have queued it, or
-- for a Redlock's attempt 4 the least fence a grant takes (see
-- mutex_attempt).
-- Reply: {1, fence} granted; {0, wait hint ms, the holder's annotation or
-- false} held (a hint of 0: a token given back, refused), and for a
-- waiting Lock the holder's fence as a fourth element (see mutex_attempt).
--
-- The fast path is the grant of a name whose key is absent, without an
-- annotation: TIME, and SET NX of "token fence" (a Redlock's fence ahead
-- of the clock flagged '>', and kept past the hold when the TTL is shorter
-- than its lead: see put_lock), written out. Any other case (the key
-- exists: held, or a marker keeping a fence or given-back tokens) goes on
-- to mutex_attempt.
local waiting = #ARGV == 6
local least = #ARGV == 4 and ARGV[4]
if ARGV[3] == '' then
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = math.max(us, tonumber(least) or 0)
  local v, px = ARGV[1] .. ' ' .. string.format('%.0f', f), tonumber(ARGV[2])
  if f > us then
    v = v .. ' >'
    local life = math.ceil((f - us) / 1000) + 1
    if life > px then
      v = v .. ' @' .. string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + px)
      px = life
    end
  end
  if redis.call('SET', KEYS[1], v, 'NX', 'PX', px) then
    if waiting and ARGV[6] == '1' and redis.pcall('ZREM', KEYS[6], ARGV[5]) == 1 then redis.pcall('ZREM', KEYS[7], ARGV[5]) end
    return {1, f}
  end
end
--@slow
return mutex_attempt(ARGV[1], ARGV[2], ARGV[3], waiting and ARGV[4], waiting and ARGV[5], least)
