--@uses now_ms remember
--@keys log gone
-- The give-back of a take that ended without its caller seeing it granted
-- (a reply lost, or come after the caller gave up): the take, if it got
-- through, leaves the log, and the token is remembered so that a late copy
-- of its attempt takes nothing. A refunded take wakes one waiter.
-- ARGV: 1 token, 2 the release channel, 3 mode ("1": a give-back).
-- Reply: 1 a take was refunded, 0 none had got through.
redis.call('ZSCORE', KEYS[2], ARGV[1]) -- type-checks gone before any write
local took = redis.call('ZREM', KEYS[1], ARGV[1])
remember(KEYS[2], ARGV[1], now_ms())
if took == 1 then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE') end
return took
