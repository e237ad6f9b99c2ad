--@keys limit
-- SetLimit of a Semaphore: the limit every client of the name grants by
-- from now on, kept for the retention after the last grant or SetLimit
-- (each grant refreshes it), and every waiter woken to try again.
-- KEYS: 1 the stored limit (sem_acquire's KEYS[5]).
-- ARGV: kit's call header (1 the call's id, unused, 2 the release
-- channel, 3 the retention ms), 4 the limit.
-- Reply: the limit it replaced (0 when none was stored).
local old = redis.call('GET', KEYS[1])
if old and not tonumber(old) then
  return redis.error_reply('WRONGTYPE stored limit ' .. KEYS[1] .. ' is not an integer')
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
return tonumber(old or '0')
