-- forcerelease: deletes a name's keys, except its fence counter, and wakes
-- its waiters, for release -force.
-- KEYS: with ARGV[3] = "1", 1 the fence counter (read, never deleted) and
-- 2... the keys to delete; otherwise (a kind without a fence counter, a
-- latch) all the keys to delete.
-- ARGV: 1 the release channel, 2 the message (pubsub.WakeAll), 3 "1" when
-- KEYS[1] is a fence counter.
-- Reply: {keys deleted, the fence counter's value or false}.
local f, first = false, 1
if ARGV[3] == '1' then
  first = 2
  if redis.call('TYPE', KEYS[1]).ok == 'string' then f = redis.call('GET', KEYS[1]) end
end
local n = redis.call('DEL', unpack(KEYS, first))
redis.pcall('PUBLISH', ARGV[1], ARGV[2])
return {n, f}
