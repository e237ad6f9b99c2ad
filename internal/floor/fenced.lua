-- The least a fenced lock costs: SET NX PX, and a fence counter raised by
-- the grant, never below the server's clock in microseconds and kept for a
-- retention after it (so that fences keep increasing across the counter's
-- expiry), as latchkit's grants do. KEYS: 1 the lock key, 2 the fence
-- counter; ARGV: 1 the token, 2 the TTL ms, 3 the retention ms. Reply: the
-- fence, or false when the lock is held.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local f = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
f = math.max(f, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
return f
