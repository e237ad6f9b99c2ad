--@uses now_ms is_counter fence_of keep raise_fence limit_of weight_of invalid fair_ahead
-- The acquire of a FairSemaphore (and FairMutex): one permit, or several
-- at once (AcquireN).
-- KEYS: 1 queue (zset token -> ticket, in arrival order), 2 liveness (zset
-- token -> expiry in server ms: a holder's lease, or a waiter's last
-- attempt plus the waiter timeout), 3 the ticket counter, 4 the fence
-- counter, 5 holders (hash token -> fence), 6 the tokens that recently
-- finished (released or given back; see remember), 7 holders'
-- annotations (hash token -> annotation), 8 waiters' inboxes (hash token
-- -> the channel its process listens on for a hand-over), 9 tickets'
-- weights (hash token -> permits, only above one), 10 the limit SetLimit
-- stored.
-- ARGV: 1 token, 2 ttl ms, 3 the constructor's limit, 4 waiter timeout ms,
-- 5 "1" for a Try (no ticket is left behind), 6 the inbox, 7 permits asked
-- for, 8 "1" to grant by the stored limit (a FairMutex: "0"),
-- 9 annotation, 10 the fence counter's retention ms (see raise_fence).
-- Reply: {1, fence} granted; {0, hint ms (until the first liveness runs
-- out, at most a third of the waiter timeout), the annotation of the first
-- holder in the queue} not (0: a token that finished, refused), and for a
-- waiting attempt that kept its ticket the fence counter as a fourth
-- element, read after its writes (false when absent): a hand-over
-- message with a greater fence was sent after this attempt ran; an
-- $INVALID error reply when more permits are asked for than the limit.
--
-- A ticket is granted only while every permit held (each holder counting
-- its weight, wherever its ticket is in the queue), the permits of the
-- waiting tickets ahead of it that could be granted, and its own stay
-- within the limit (fair_ahead): the permits held never exceed the limit,
-- whatever the clients' clocks say, and a large request at the head is
-- never overtaken by smaller ones behind it. Holders are not only ahead
-- of waiters: a waiting ticket heavier than the limit (SetLimit lowered
-- it) is passed over, and tickets behind it may be granted meanwhile; one
-- that fits but has not attempted yet (a death ahead of it frees permits
-- without a hand-over) may see a newcomer granted behind it. So a grant
-- counts the holders behind it too.
local now = now_ms()
local ttl, wait, n = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[7])
local ticket = redis.call('ZSCORE', KEYS[1], ARGV[1])
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
local c = redis.call('GET', KEYS[3])
if c and not is_counter(c) then return redis.error_reply('WRONGTYPE ticket counter ' .. KEYS[3] .. ' is not an integer') end
local bad = fence_of(KEYS[4]); if bad then return bad end
local limit, lbad = limit_of(KEYS[10], ARGV[3], ARGV[8]); if not limit then return lbad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return {0, 0, false} end
redis.call('HLEN', KEYS[7])
redis.call('HLEN', KEYS[8])
redis.call('HLEN', KEYS[9])
local keepall = function(ms)
  keep(KEYS[1], ms); keep(KEYS[2], ms); keep(KEYS[3], ms); keep(KEYS[5], ms); keep(KEYS[8], ms)
  if n > 1 then keep(KEYS[9], ms) end
end
local function annotate()
  if ARGV[9] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[9]); keep(KEYS[7], ttl) end
end
local function holder()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then return false end
  return redis.call('HGET', KEYS[7], first[1])
end
-- hint is how long a refused attempt may wait: a third of the waiter
-- timeout (its heartbeat), or less when a holder's or waiter's liveness
-- runs out sooner: a holder that stopped renewing frees its permit
-- silently, and the waiter behind it should try again then.
local function hint()
  local h = math.floor(wait / 3)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then h = math.min(h, tonumber(first[2]) - now) end
  return math.max(h, 1)
end
if myfence and alive and tonumber(alive) > now then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keepall(ttl); annotate()
  return {1, tonumber(myfence)}
end
if n > limit then return invalid('asked for ' .. n .. ' permits, above the limit ' .. limit) end
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #dead do
  redis.call('ZREM', KEYS[1], dead[i])
  redis.call('HDEL', KEYS[5], dead[i])
  redis.call('HDEL', KEYS[7], dead[i])
  redis.call('HDEL', KEYS[8], dead[i])
  redis.call('HDEL', KEYS[9], dead[i])
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
if not ticket or not alive or tonumber(alive) <= now then
  if ARGV[5] == '1' and fair_ahead(KEYS[1], KEYS[9], KEYS[5], false, limit, limit - n) + n > limit then
    return {0, hint(), holder()}
  end
  ticket = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[1], ticket, ARGV[1])
  if n > 1 then redis.call('HSET', KEYS[9], ARGV[1], n) end
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[8], ARGV[1], ARGV[6]) end
end
if fair_ahead(KEYS[1], KEYS[9], KEYS[5], ARGV[1], limit, limit - n) + n <= limit then
  redis.call('HDEL', KEYS[8], ARGV[1])
  local f = raise_fence(KEYS[4], ARGV[10])
  redis.call('HSET', KEYS[5], ARGV[1], f)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if ARGV[8] == '1' then redis.call('PEXPIRE', KEYS[10], ARGV[10]) end
  keepall(ttl); annotate()
  return {1, f}
end
redis.call('ZADD', KEYS[2], now + wait, ARGV[1])
keepall(wait)
return {0, hint(), holder(), redis.call('GET', KEYS[4])}
