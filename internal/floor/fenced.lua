-- The acquire of the least a fenced, queue-aware lock costs: the fence is
-- the server's clock in microseconds, stored in the lock's value beside
-- the token ("token fence"), as latchkit's Mutex stores it; nothing is
-- remembered. KEYS: 1 the lock key. ARGV: 1 the token, 2 the TTL ms.
-- Reply: the fence, or false when the lock is held.
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return false end
return f
