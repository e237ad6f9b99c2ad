--@uses now_ms remember
-- The release of an RWLock reader, and (ARGV[3] = "1") the give-back of
-- a reader's acquisition that ended without a grant. The last live
-- reader's release wakes everyone waiting.
-- KEYS: 1 readers (zset token -> expiry, server ms), 2 the writer (its
-- token, PX ttl), 3 waiting writers' intents (zset token -> expiry), 4 the
-- fence counter, 5 holders' fences (hash token -> fence), 6 the tokens
-- that recently finished (released or given back; see remember),
-- 7 holders' annotations (hash token -> annotation).
-- ARGV: 1 token, 2 the release channel, 3 "1" for a give-back, "0" for a
-- pass (absent for a release): the read lease is freed but the token is
-- not remembered, since the acquisition goes on (a grant WithReplicaAck
-- refused, see rwReader.pass) and its next attempt, with the same token,
-- must not be taken for a late copy.
-- Reply: 1 released (now or by an earlier try of this release), 0 not
-- held.
--
-- The fast path is the release (or give-back) of a live reader, written
-- out as the slow path and remember do it; the fences and annotations are
-- type-checked by reads (the annotations' HDEL left out when there are
-- none), the finished tokens by the first write (remember's trim). Any
-- other case goes on to the slow path.
if ARGV[3] ~= '0' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if exp and tonumber(exp) > now then
    redis.call('HLEN', KEYS[5])
    local notes = redis.call('HLEN', KEYS[7])
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - $MARKER_MS)
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[5], ARGV[1])
    if notes > 0 then redis.call('HDEL', KEYS[7], ARGV[1]) end
    redis.call('ZADD', KEYS[6], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[6], $MARKER_MS)
    if redis.call('ZCOUNT', KEYS[1], now + 1, '+inf') == 0 then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL') end
    return 1
  end
end
--@slow
local now = now_ms()
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('HLEN', KEYS[5]); redis.call('HLEN', KEYS[7]); redis.call('ZCARD', KEYS[6])
if exp then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  if tonumber(exp) <= now then
    if ARGV[3] == '1' then remember(KEYS[6], ARGV[1], now) end
    return 0
  end
  if ARGV[3] ~= '0' then remember(KEYS[6], ARGV[1], now) end
  if redis.call('ZCOUNT', KEYS[1], now + 1, '+inf') == 0 then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL') end
  return 1
end
local done = redis.call('ZSCORE', KEYS[6], ARGV[1])
if ARGV[3] == '1' then remember(KEYS[6], ARGV[1], now) end
if done then return 1 end
return 0
