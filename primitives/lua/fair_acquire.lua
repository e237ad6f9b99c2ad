--@uses clock keep limit_of weight_of invalid fair_ahead next_fence keep_fence fair_top heartbeat
-- The acquire of a FairSemaphore (and FairMutex): one permit, or several
-- at once (AcquireN).
-- KEYS: 1 queue (zset token -> ticket, in arrival order), 2 liveness (zset
-- token -> expiry in server ms: a holder's lease, or a waiter's last
-- attempt plus the waiter timeout), 3 holders (hash token -> fence), 4 the
-- tokens given back in the last $MARKER_MS ms (see remember), and under
-- the member '#' the last fence while it is not behind the server's
-- clock: see keep_fence, 5 holders' annotations (hash token ->
-- annotation), 6 waiters' inboxes (hash token -> the channel its process
-- listens on for a hand-over), 7 tickets' weights (hash token -> permits,
-- only above one), 8 the limit SetLimit stored. (The layout's legacy
-- keys, latchkit 0.x's ticket and fence counters, are not passed.)
-- ARGV: 1 token, 2 ttl ms, 3 the constructor's limit, 4 waiter timeout ms,
-- 5 "1" for a Try (no ticket is left behind), 6 the inbox, 7 permits asked
-- for, 8 "1" to grant by the stored limit (a FairMutex: "0"),
-- 9 annotation, 10 the retention ms (how long a stored limit outlives a
-- grant).
-- Reply: {1, fence} granted; {0, hint ms (until the first liveness runs
-- out, at most a third of the waiter timeout), the annotation of the first
-- holder in the queue} not (0: a token given back, refused), and for a
-- waiting attempt that kept its ticket a fourth element, the highest
-- fence granted so far (or the clock, when above it), as a string: a
-- hand-over message with a greater fence was sent after this attempt ran;
-- an $INVALID error reply when more permits are asked for than the limit.
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
-- counts the holders behind it too. A new ticket is one above the last in
-- the queue. A grant's fence is the server's clock in µs, above every
-- fence held (fair_top) and the one kept while ahead (next_fence); one
-- raised above the clock is kept beside the given-back tokens too
-- (keep_fence), so that it outlives its holder.
--
-- The fast path is the grant of one permit, without an annotation, on a
-- name with no key at all (one EXISTS for the eight): the slow path's
-- grant, written out (ticket 1, the clock as the fence). Any other case
-- goes on to the slow path.
if ARGV[7] == '1' and ARGV[9] == '' and redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]) == 0 then
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now = math.floor(us / 1000)
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], 1, ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], us)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl); redis.call('PEXPIRE', KEYS[2], ttl); redis.call('PEXPIRE', KEYS[3], ttl)
  return {1, us}
end
--@slow
local now, us = clock()
local ttl, wait, n = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[7])
local ticket = redis.call('ZSCORE', KEYS[1], ARGV[1])
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
local limit, lbad = limit_of(KEYS[8], ARGV[3], ARGV[8]); if not limit then return lbad end
local myfence = redis.call('HGET', KEYS[3], ARGV[1])
local g = redis.call('ZMSCORE', KEYS[4], ARGV[1], '#')
if g[1] then return {0, 0, false} end
redis.call('HLEN', KEYS[5])
redis.call('HLEN', KEYS[6])
redis.call('HLEN', KEYS[7])
local keepall = function(ms)
  keep(KEYS[1], ms); keep(KEYS[2], ms); keep(KEYS[3], ms); keep(KEYS[6], ms)
  if n > 1 then keep(KEYS[7], ms) end
end
local function annotate()
  if ARGV[9] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[9]); keep(KEYS[5], ttl) end
end
local function holder()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then return false end
  return redis.call('HGET', KEYS[5], first[1])
end
-- hint is how long a refused attempt may wait: a third of the waiter
-- timeout (its heartbeat), or less when a holder's or waiter's liveness
-- runs out sooner: a holder that stopped renewing frees its permit
-- silently, and the waiter behind it should try again then.
local function hint()
  local h = heartbeat(wait)
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
  redis.call('HDEL', KEYS[3], dead[i])
  redis.call('HDEL', KEYS[5], dead[i])
  redis.call('HDEL', KEYS[6], dead[i])
  redis.call('HDEL', KEYS[7], dead[i])
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
if not ticket or not alive or tonumber(alive) <= now then
  if ARGV[5] == '1' and fair_ahead(KEYS[1], KEYS[7], KEYS[3], false, limit, limit - n) + n > limit then
    return {0, hint(), holder()}
  end
  ticket = (tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]) or 0) + 1
  redis.call('ZADD', KEYS[1], ticket, ARGV[1])
  if n > 1 then redis.call('HSET', KEYS[7], ARGV[1], n) end
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[6], ARGV[1], ARGV[6]) end
end
if fair_ahead(KEYS[1], KEYS[7], KEYS[3], ARGV[1], limit, limit - n) + n <= limit then
  redis.call('HDEL', KEYS[6], ARGV[1])
  local f = next_fence(us, g[2], fair_top(KEYS[3]) + 1)
  redis.call('HSET', KEYS[3], ARGV[1], f)
  if f > us then keep_fence(KEYS[4], f, us) end
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if ARGV[8] == '1' then redis.call('PEXPIRE', KEYS[8], ARGV[10]) end
  keepall(ttl); annotate()
  return {1, f}
end
redis.call('ZADD', KEYS[2], now + wait, ARGV[1])
keepall(wait)
return {0, hint(), holder(), string.format('%.0f', math.max(us, fair_top(KEYS[3]), tonumber(g[2]) or 0))}
