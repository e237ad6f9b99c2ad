--@uses clock remember fence_member holder_of keep_fence_of
--@keys holders waiting gone who
-- The release of an RWLock reader, and (ARGV[3] = "1") the give-back of
-- a reader's acquisition that ended without a grant it saw, which
-- remembers the token (see remember); a release remembers nothing (see
-- sem_release). Readers wait only for a writer, and a writer waiting for
-- readers leaves its intent: so the last live reader's release wakes
-- everyone waiting when an intent is left, and sends nothing otherwise.
-- KEYS: rw_read's but the writer: 1 readers, 2 waiting writers' intents,
-- 3 the given-back tokens, 4 holders' annotations.
-- ARGV: 1 token, 2 the release channel, 3 "1" for a give-back (absent, or
-- anything else, for a release: a pass, see rwReader.Pass, is one).
-- Reply: 1 released, 0 not held.
--
-- The fast path is the release of a live reader whose fence is behind the
-- clock: a lone reader (see rw_read: nothing is written beside one) is
-- taken out at once; a reader of the spread form where no writer's intent
-- and no annotation exists (one EXISTS for both) with its fence member; as
-- the slow path does it. Any other case goes on to the slow path.
if ARGV[3] ~= '1' then
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if s and s >= 1e14 then -- a lone reader: live, as its key is; s is its fence
    if s < us then
      redis.call('ZREM', KEYS[1], ARGV[1])
      return 1
    end
  elseif s and s > math.floor(us / 1000) and redis.call('EXISTS', KEYS[2], KEYS[4]) == 0 then
    local f = tonumber(redis.call('ZSCORE', KEYS[1], '#' .. ARGV[1]))
    if not (f and f >= us) then
      redis.call('ZREM', KEYS[1], ARGV[1], '#' .. ARGV[1])
      return 1
    end
  end
end
--@slow
local now, us = clock()
local exp, f, lone = holder_of(KEYS[1], ARGV[1], now)
local intents = redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[4])
if ARGV[3] == '1' then redis.call('ZSCORE', KEYS[3], '#') end -- type-checks the given-back tokens before any write (a release writes them only by redis.pcall)
local live = false
if exp then
  if lone then redis.call('ZREM', KEYS[1], ARGV[1])
  else redis.call('ZREM', KEYS[1], ARGV[1], fence_member(ARGV[1])) end
  redis.call('HDEL', KEYS[4], ARGV[1])
  live = exp > now
end
if ARGV[3] == '1' then remember(KEYS[3], ARGV[1], now) end
keep_fence_of(KEYS[3], f, us)
if not live then return 0 end
if intents > 0 and redis.call('ZCOUNT', KEYS[1], now + 1, '(100000000000000') == 0 then
  redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
end
return 1
