--@uses enqueue dequeue hand_over foreign_lock clock queue_len lock_read lock_value put_lock heartbeat
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
-- A token given back (remembered on every name, the first name's key
-- flagged: see mutex_withdraw) is refused: a late copy of an attempt whose
-- acquisition has ended.
-- A waiting Lock takes its names in canonical order, as a thread takes
-- mutexes in a fixed order: it reserves (sets to its token for the waiter
-- timeout, heartbeated by its attempts) every name before the first one
-- held by someone else, queues on that one like a waiting Mutex Lock, and
-- holds and queues nowhere beyond it (a name handed over to it out of
-- order is passed on). A release of the name it queues on hands it over
-- and wakes it; once every name is its own, it is granted. Ordered holding
-- keeps two MultiLocks from deadlocking; queueing keeps a stream of Mutex
-- holders from starving it.
local n = #KEYS / 7
local tok, waiting = ARGV[1], ARGV[4] ~= ''
local state, vals, fences, flags, first, hint, who = {}, {}, {}, {}, nil, 0, false
local now, us = clock()
for i = 0, n - 1 do
  local k = i * 7 + 1
  local v = redis.call('GET', KEYS[k])
  local o, f, fl = lock_read(v, now)
  vals[i], fences[i], flags[i] = v, f, fl
  if i == 0 and fl.g and redis.call('ZSCORE', KEYS[k+4], tok) then return {0, 0, false} end
  if ARGV[3] ~= '' then redis.call('GET', KEYS[k+3]) end -- type-checks the annotation before any write
  if waiting then
    redis.call('ZSCORE', KEYS[k+5], ARGV[5])
    redis.call('ZSCORE', KEYS[k+6], ARGV[5])
  end
  if o == tok then
    state[i] = 'mine'
  elseif o then
    state[i] = 'held'
    local pttl = redis.call('PTTL', KEYS[k])
    local foreign = foreign_lock(KEYS[k], pttl); if foreign then return foreign end
    if fl.till then pttl = fl.till - now end
    if not first then
      first = i
      hint, who = math.max(pttl, 1), fl.a and redis.call('GET', KEYS[k+3]) or false
    end
  else
    state[i] = 'free'
  end
end
-- take puts name i (at k) in the token's hands for ms: renewed when it is
-- its own, taken with a new fence when free.
local function take(i, k, ms, note)
  local fl = flags[i]
  if state[i] == 'mine' and fences[i] then
    fl.a = fl.a or note
    put_lock(KEYS[k], tok, fences[i], fl, ms, now, us, vals[i])
    return fences[i]
  elseif state[i] == 'mine' then
    redis.call('PEXPIRE', KEYS[k], ms)
    return 0
  end
  local f = math.max(us, (fences[i] or -1) + 1)
  put_lock(KEYS[k], tok, f, {g = fl.g, a = note, q = queue_len(KEYS[k+5], KEYS[k+6]) > 0 or nil}, ms, now, us)
  return f
end
if not first then
  local out = {1}
  for i = 0, n - 1 do
    local k = i * 7 + 1
    if waiting then dequeue(KEYS[k+5], KEYS[k+6], ARGV[5]) end
    out[#out+1] = take(i, k, ARGV[2], ARGV[3] ~= '' or nil)
    if ARGV[3] ~= '' then redis.call('SET', KEYS[k+3], ARGV[3], 'PX', ARGV[2]) end
  end
  return out
end
if not waiting then return {0, hint, who} end
local wait = tonumber(ARGV[4])
for i = 0, n - 1 do
  local k = i * 7 + 1
  if i < first then
    dequeue(KEYS[k+5], KEYS[k+6], ARGV[5])
    take(i, k, wait, nil)
  elseif i == first then
    enqueue(KEYS[k+5], KEYS[k+6], ARGV[5], wait)
    local fl = flags[i]
    if fences[i] and not fl.q then
      fl.q = true
      redis.call('SET', KEYS[k], lock_value(lock_read(vals[i]), fences[i], fl), 'KEEPTTL')
    end
  else
    dequeue(KEYS[k+5], KEYS[k+6], ARGV[5])
    if state[i] == 'mine' then hand_over(k, tok, ARGV[7+i], ARGV[6], vals[i], now, us) end
  end
end
return {0, math.min(hint, heartbeat(wait)), who}
