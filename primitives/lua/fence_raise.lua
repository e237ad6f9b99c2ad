--@uses fence_of
-- Raises one Redlock instance's fence counter to at least a grant's fence,
-- so that a quorum holds the fence the grant handed out.
-- KEYS: 1 the fence counter.
-- ARGV: 1 the fence, 2 the counter's retention ms.
-- Reply: the fence.
local bad = fence_of(KEYS[1]); if bad then return bad end
local f = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < f then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return f
