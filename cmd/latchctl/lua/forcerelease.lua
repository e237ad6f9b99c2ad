-- forcerelease: deletes a name's keys, except its fence counter, and wakes
-- its waiters, for release -force.
-- KEYS: 1 the fence counter (read, never deleted), 2... the keys to delete.
-- ARGV: 1 the release channel, 2 the message (pubsub.WakeAll).
-- Reply: {keys deleted, the fence counter's value or false}.
local f = false
if redis.call('TYPE', KEYS[1]).ok == 'string' then f = redis.call('GET', KEYS[1]) end
local n = redis.call('DEL', unpack(KEYS, 2))
redis.call('PUBLISH', ARGV[1], ARGV[2])
return {n, f}
