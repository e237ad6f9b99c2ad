-- SetLimit of a Semaphore: the limit every client of the name grants by
-- from now on, kept for the retention after the last grant or SetLimit
-- (each grant refreshes it), and every waiter woken to try again.
-- KEYS: 1 the stored limit (sem_acquire's KEYS[7]).
-- ARGV: 1 the limit, 2 the retention ms, 3 the release channel.
-- Reply: the limit it replaced (0 when none was stored).
local old = redis.call('GET', KEYS[1])
if old and not tonumber(old) then
  return redis.error_reply('WRONGTYPE stored limit ' .. KEYS[1] .. ' is not an integer')
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.pcall('PUBLISH', ARGV[3], '$WAKE_ALL')
return tonumber(old or '0')
