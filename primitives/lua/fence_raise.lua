--@uses clock lock_read put_lock
-- Raises the fence one Redlock instance holds for a grant to the grant's
-- fence (the highest its granting instances gave), so that a quorum holds
-- it: the lock's value while the token holds it, kept past the hold while
-- it is ahead of the clock (see put_lock), so that a later grant there
-- takes a fence above it, also once the lock is gone; a free marker when
-- the token no longer holds it.
-- KEYS: 1 the lock.
-- ARGV: 1 the token, 2 the fence.
-- Reply: the fence.
local v = redis.call('GET', KEYS[1])
local now, us = clock()
local o, f, fl = lock_read(v, now)
local nf = tonumber(ARGV[2])
if (f or 0) < nf then
  if o == ARGV[1] then
    local left = fl.till and fl.till - now or redis.call('PTTL', KEYS[1])
    if left > 0 then put_lock(KEYS[1], o, nf, fl, left, now, us) end
  elseif not o then
    put_lock(KEYS[1], '~', nf, fl, 1, now, us)
  end
end
return nf
