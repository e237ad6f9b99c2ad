--@uses mutex_attempt keep seat
-- A campaign's attempt at an Election's seat: a waiting Mutex attempt on
-- the election's lock (see mutex_attempt), which, when granted, seats the
-- candidate's value, and, when it queues, keeps the value beside its queue
-- entry so that a resigning leader can seat it at once.
-- KEYS: 1-7 as mutex_acquire (the lock, two reserved,
-- annotation, tokens given back, wait queue, waiters' liveness), 8 the
-- seat (hash v -> the leader's value, f -> its fence; expiring with the
-- lock), 9 the candidates' values (hash queue entry -> value).
-- ARGV: 1 token, 2 ttl ms, 3 annotation, 4 waiter timeout ms and 5 queue
-- entry (both "" for a TryCampaign, which never queues), 6 the retention
-- ms (unused), 7 the value, 8 the observers' channel.
-- Reply: as mutex_acquire.
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
local waiting = ARGV[4] ~= ''
local r = mutex_attempt(ARGV[1], ARGV[2], ARGV[3], waiting and ARGV[4], waiting and ARGV[5])
if r[1] == 1 then
  if waiting then redis.call('HDEL', KEYS[9], ARGV[5]) end
  seat(KEYS[8], ARGV[8], r[2], ARGV[7], tonumber(ARGV[2]))
elseif r[1] == 0 and waiting and #r == 4 then -- queued (a given-back token's late copy is refused, {0, 0, false})
  redis.call('HSET', KEYS[9], ARGV[5], ARGV[7])
  keep(KEYS[9], tonumber(ARGV[4]))
  if redis.call('HLEN', KEYS[9]) > redis.call('ZCARD', KEYS[6]) then
    for _, e in ipairs(redis.call('HKEYS', KEYS[9])) do
      if not redis.call('ZSCORE', KEYS[6], e) then redis.call('HDEL', KEYS[9], e) end
    end
  end
end
return r
