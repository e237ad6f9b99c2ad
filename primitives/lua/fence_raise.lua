--@uses clock owner held_fence lock_value keep_fence
-- Raises the fence one Redlock instance holds for a grant to the grant's
-- fence (the highest its granting instances gave), so that a quorum holds
-- it: the lock's value, while the token holds it, and the fence kept
-- beside the finished tokens while it may be ahead of the clock (so that
-- a later grant there takes a fence above it, also once the lock is gone).
-- KEYS: 1 the lock, 2 the finished tokens.
-- ARGV: 1 the token, 2 the fence.
-- Reply: the fence.
local v = redis.call('GET', KEYS[1])
redis.call('ZSCORE', KEYS[2], '#') -- type-checks the finished tokens before any write
local f = tonumber(ARGV[2])
if owner(v) == ARGV[1] and (held_fence(v) or 0) < f then
  redis.call('SET', KEYS[1], lock_value(ARGV[1], f), 'KEEPTTL')
end
local _, us = clock()
keep_fence(KEYS[2], f, us)
return f
