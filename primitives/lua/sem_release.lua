--@uses clock remember weight_of fence_member holder_of keep_fence_of
--@keys holders gone who weights
-- The release of a Semaphore lease (all the permits it holds), and
-- (ARGV[3] = "1") the give-back of an acquisition that ended without a
-- grant it saw: the permits the token may hold are freed, and a give-back
-- remembers the token (see remember: a late copy of its attempt is
-- refused). A release remembers nothing: a retried release whose first
-- try did free the permits finds the token gone and replies 0, and the
-- client, which knows it sent that try while the lease was live, reports
-- success (kit.Lease.release). The token's fence is kept beside the
-- given-back tokens while it is not behind the clock: see keep_fence_of
-- (a clock that did not move since the grant).
-- KEYS: sem_acquire's first four (the stored limit is not passed).
-- ARGV: 1 token, 2 the release channel, 3 "1" for a give-back (absent, or
-- anything else, for a release: a pass, see semaphore.Pass, is one).
-- Reply: 1 released, 0 not held.
--
-- While the semaphore is waited for (the "!" mark, see sem_acquire), the
-- release message counts the permits freed, each waking one waiter, and
-- while a waiter for several permits is marked ("~") it wakes every
-- waiter. Nobody waiting, it sends none.
--
-- The fast path is the release of a live holder whose fence is behind
-- the clock: a lone holder (see fence_member: nothing is written beside
-- one) is taken out at once; a holder of the spread form where no
-- annotation, weight or waiter's mark exists (one EXISTS for both hashes)
-- with its fence member; as the slow path does it. Any other case goes on
-- to the slow path.
if ARGV[3] ~= '1' then
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if s and s >= 1e14 then -- a lone holder: live, as its key is; s is its fence
    if s < us then
      redis.call('ZREM', KEYS[1], ARGV[1])
      return 1
    end
  elseif s and s > math.floor(us / 1000) and redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
    local f = tonumber(redis.call('ZSCORE', KEYS[1], '#' .. ARGV[1]))
    if not (f and f >= us) then
      redis.call('ZREM', KEYS[1], ARGV[1], '#' .. ARGV[1])
      return 1
    end
  end
end
--@slow
local now, us = clock()
local exp, f, lone = holder_of(KEYS[1], ARGV[1], now)
if ARGV[3] == '1' then redis.call('ZSCORE', KEYS[2], '#') end -- type-checks the given-back tokens before any write (a release writes them only by redis.pcall)
local n = weight_of(KEYS[4], ARGV[1])
redis.call('HLEN', KEYS[3])
local live = false
if exp then
  if lone then redis.call('ZREM', KEYS[1], ARGV[1])
  else redis.call('ZREM', KEYS[1], ARGV[1], fence_member(ARGV[1])) end
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  live = exp > now
end
if ARGV[3] == '1' then remember(KEYS[2], ARGV[1], now) end
keep_fence_of(KEYS[2], f, us)
if live then
  local marks = redis.call('HMGET', KEYS[4], '!', '~')
  if tonumber(marks[1] or '0') > now then
    local wake = tostring(n)
    if tonumber(marks[2] or '0') > now then wake = '$WAKE_ALL' end
    redis.pcall('PUBLISH', ARGV[2], wake)
  end
  return 1
end
return 0
