--@uses clock lock_read hand_over
-- The release of a Mutex, and of each instance of a Redlock.
-- KEYS as mutex_acquire (a Redlock passes the first five; the reserved
-- keys are not touched).
-- ARGV: 1 token, 2 the release channel ('' for none: a Redlock's
-- instances but the first, where nobody listens), 3 how long a lock
-- handed over waits for its new holder to confirm, ms.
-- Reply: 1 released, 0 not held.
--
-- A release writes only the lock: it hands it over, or deletes it, and
-- remembers nothing. A release retried after its first reply was lost
-- finds the token gone and replies 0; the client, which knows it sent the
-- first try while the lease was live, reports success (kit.Lease.release).
-- A fence not behind the server's clock (a clock that stands still, as a
-- test's may) is kept by a free marker of the lock key (see put_lock), so
-- that the name's next grant takes a fence above it; on a clock that
-- moves, the next grant's is past it anyway.
--
-- The fast path is the release of a lock whose value has no flags (no
-- waiter queued, no annotation, nothing given back, a fence not ahead of
-- the clock at its grant): TIME, then DEL, or SET of the marker "~ fence"
-- for a millisecond when the clock has not passed the fence, written out.
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^(%S+) %d+$') == ARGV[1] then
  local t = redis.call('TIME')
  if tonumber(string.sub(v, #ARGV[1] + 2)) >= tonumber(t[1]) * 1000000 + tonumber(t[2]) then
    redis.call('SET', KEYS[1], '~' .. string.sub(v, #ARGV[1] + 1), 'PX', 1)
  else
    redis.call('DEL', KEYS[1])
  end
  if not KEYS[6] and ARGV[2] ~= '' then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE') end
  return 1
end
--@slow
local now, us = clock()
if lock_read(v, now) ~= ARGV[1] then return 0 end
hand_over(1, ARGV[1], ARGV[2], ARGV[3], v, now, us)
return 1
