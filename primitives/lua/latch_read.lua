--@uses latch_count
--@keys latch
-- Count (and each read of Wait) of a Latch.
-- KEYS: 1 the latch (as latch_set).
-- ARGV: kit's call header, unused.
-- Reply: {the count (a decimal string; "0" when the key does not exist),
-- the key's PTTL (ms it has left; -1 without expiry, -2 absent), the
-- round (the id of the call that set it) or false}.
local _, bad = latch_count(KEYS[1]); if bad then return bad end
return {redis.call('HGET', KEYS[1], 'count') or '0', redis.call('PTTL', KEYS[1]),
  redis.call('HGET', KEYS[1], 'round')}
