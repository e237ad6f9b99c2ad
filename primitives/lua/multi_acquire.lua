--@uses enqueue dequeue hand_over foreign_lock clock owner held_fence lock_value keep_fence next_fence
-- The acquire of a MultiLock whose names live on one server.
-- KEYS: the Mutex keys of every name, in canonical order, seven per name
-- (lock, two reserved, annotation, tokens given back,
-- wait queue, liveness), so that a MultiLock excludes, and is excluded by,
-- a Mutex of any of its names.
-- ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), 4 the waiter
-- timeout ms ("" for a TryLock: it never writes unless it is granted),
-- 5 the queue entry ("token inbox"), 6 hand ms (see mutex_release),
-- 7.. the release channel of each name; last, the retention
-- ms (unused).
-- Reply: {1, fence...} with one fence per name, granted; {0, wait hint ms,
-- annotation of the holder} held.
--
-- A token given back (remembered in the first name's keys) is refused: a
-- late copy of an attempt whose acquisition has ended.
-- A waiting Lock takes its names in canonical order, as a thread takes
-- mutexes in a fixed order: it reserves (sets to its token for the waiter
-- timeout, heartbeated by its attempts) every name before the first one
-- held by someone else, queues on that one like a waiting Mutex Lock, and
-- holds and queues nowhere beyond it (a name handed over to it out of
-- order is passed on). A release of the name it queues on hands it over
-- and wakes it; once every name is its own, it is granted. Ordered holding
-- keeps two MultiLocks from deadlocking; queueing keeps a stream of Mutex
-- holders from starving it.
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return {0, 0, false} end
local n = #KEYS / 7
local tok, waiting = ARGV[1], ARGV[4] ~= ''
local state, vals, marks, first, hint, who = {}, {}, {}, nil, 0, false
local now, us = clock()
for i = 0, n - 1 do
  local k = i * 7 + 1
  local v = redis.call('GET', KEYS[k])
  vals[i], marks[i] = v, redis.call('ZSCORE', KEYS[k+4], '#') -- type-checks the finished tokens before any write
  if ARGV[3] ~= '' then redis.call('GET', KEYS[k+3]) end -- type-checks the annotation before any write
  if waiting then
    redis.call('ZSCORE', KEYS[k+5], ARGV[5])
    redis.call('ZSCORE', KEYS[k+6], ARGV[5])
  end
  if owner(v) == tok then
    state[i] = 'mine'
  elseif v then
    state[i] = 'held'
    local pttl = redis.call('PTTL', KEYS[k])
    local foreign = foreign_lock(KEYS[k], pttl); if foreign then return foreign end
    if not first then
      first = i
      hint, who = math.max(pttl, 1), redis.call('GET', KEYS[k+3])
    end
  else
    state[i] = 'free'
  end
end
if not first then
  local out = {1}
  for i = 0, n - 1 do
    local k = i * 7 + 1
    if state[i] == 'mine' then
      redis.call('PEXPIRE', KEYS[k], ARGV[2])
      out[#out+1] = held_fence(vals[i]) or 0
    else
      local f = next_fence(us, marks[i])
      redis.call('SET', KEYS[k], lock_value(tok, f), 'PX', ARGV[2])
      if f > us then keep_fence(KEYS[k+4], f, us) end
      out[#out+1] = f
    end
    if ARGV[3] ~= '' then redis.call('SET', KEYS[k+3], ARGV[3], 'PX', ARGV[2]) end
    if waiting then dequeue(KEYS[k+5], KEYS[k+6], ARGV[5]) end
  end
  return out
end
if not waiting then return {0, hint, who} end
local wait = tonumber(ARGV[4])
for i = 0, n - 1 do
  local k = i * 7 + 1
  if i < first then
    if state[i] == 'free' then
      local f = next_fence(us, marks[i])
      redis.call('SET', KEYS[k], lock_value(tok, f), 'PX', wait)
      if f > us then keep_fence(KEYS[k+4], f, us) end
    else
      redis.call('PEXPIRE', KEYS[k], wait)
    end
    dequeue(KEYS[k+5], KEYS[k+6], ARGV[5])
  elseif i == first then
    enqueue(KEYS[k+5], KEYS[k+6], ARGV[5], wait)
  else
    dequeue(KEYS[k+5], KEYS[k+6], ARGV[5])
    if state[i] == 'mine' then hand_over(k, tok, ARGV[7+i], ARGV[6], vals[i], now, us) end
  end
end
return {0, math.min(hint, math.max(math.floor(wait / 3), 1)), who}
