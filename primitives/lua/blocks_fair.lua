-- A semaphore's limit and weights, and a FairSemaphore's queue (see
-- blocks.lua).

--@ limit_of
-- limit_of is the limit a semaphore grants by: the one SetLimit stored at
-- key, when there is one and stored is '1', else def (the constructor's).
-- A FairMutex passes stored '0': it is one permit whatever is stored. It
-- returns nil and the error reply to return when key holds something
-- that is not an integer (a key of another type raises WRONGTYPE). It
-- writes nothing.
local function limit_of(key, def, stored)
  if stored ~= '1' then return tonumber(def) end
  local s = redis.call('GET', key)
  if not s then return tonumber(def) end
  local n = tonumber(s)
  if not n then return nil, redis.error_reply('WRONGTYPE stored limit ' .. key .. ' is not an integer') end
  return n
end

--@ weight_of
-- weight_of is how many permits tok holds or asks for: its entry in the
-- weights hash wkey (only weights above one are stored), else 1.
local function weight_of(wkey, tok)
  return tonumber(redis.call('HGET', wkey, tok) or '1') or 1
end

--@ fair_held uses weight_of
-- fair_held is the number of permits a FairSemaphore's holders hold, the
-- hash holders naming them (weights in wkey): every holder's weight,
-- wherever its ticket is in the queue. A holder's ticket can be behind a
-- waiting one: granted while that waiter was heavier than the limit and
-- passed over, or while it fitted but had not yet attempted. With no
-- weight stored it is the number of holders.
local function fair_held(holders, wkey)
  local n = redis.call('HLEN', holders)
  if n == 0 or redis.call('HLEN', wkey) == 0 then return n end
  local sum = 0
  for _, t in ipairs(redis.call('HKEYS', holders)) do sum = sum + weight_of(wkey, t) end
  return sum
end

--@ fair_ahead uses weight_of fair_held
-- fair_ahead is what a FairSemaphore ticket tok must fit beside, in the
-- queue q: every permit held (fair_held, wherever the holders' tickets
-- are), plus the weights of the waiting tickets ahead of tok (of every
-- waiting ticket when tok is false) no heavier than limit. A waiting
-- ticket heavier than limit (SetLimit lowered it) can never be granted:
-- it is passed over, neither counted nor holding back the tickets behind
-- it, until its next attempt takes it out or the limit rises again. It
-- stops as soon as the sum passes most. Every holder has a ticket in q,
-- so with no weight stored (every ticket one permit) the tickets ahead of
-- tok are at most the sum, and all of them, when tok is false, are the
-- sum.
local function fair_ahead(q, wkey, holders, tok, limit, most)
  local sum = fair_held(holders, wkey)
  if sum > most then return sum end
  local weighted = redis.call('HLEN', wkey) > 0
  if not weighted then
    if not tok then return math.max(sum, redis.call('ZCARD', q)) end
    local rank = redis.call('ZRANK', q, tok)
    if rank > most then return rank end
  end
  local i = 0
  while true do
    local batch = redis.call('ZRANGE', q, i, i + 99)
    if #batch == 0 then return sum end
    for _, t in ipairs(batch) do
      if t == tok then return sum end
      if redis.call('HEXISTS', holders, t) == 0 then
        local w = 1
        if weighted then w = weight_of(wkey, t) end
        if w <= limit then sum = sum + w end
        if sum > most then return sum end
      end
    end
    i = i + 100
  end
end

--@ fair_top
-- fair_top is the highest fence a FairSemaphore's holders hold (the hash
-- holders: token -> fence), or 0 without holders: a new grant's fence is
-- above it (next_fence), so that grants in the same µs take increasing
-- fences although no counter is kept.
local function fair_top(holders)
  local top = 0
  for _, f in ipairs(redis.call('HVALS', holders)) do top = math.max(top, tonumber(f) or 0) end
  return top
end

--@ fair_hand_over uses keep target weight_of fair_held next_fence keep_fence_of fair_top
-- fair_hand_over runs once a FairSemaphore holder or queued waiter has
-- left, or its limit was raised (KEYS as fair_acquire; now and us the
-- server's clock, see clock): starting from the
-- permits held (fair_held: every holder's, wherever its ticket is) and
-- going down the queue from its head while they stay within limit, every
-- live waiting ticket that fits is granted its permits at once (fence,
-- holder entry, at most confirm ms of liveness to confirm in) and woken
-- alone by a message on its process's inbox (without one: on chan) naming
-- it by digest, with the grant's fence and its liveness (see target); the
-- first live waiting ticket that does not fit stops it, so a large request
-- at the head is never overtaken by smaller ones behind it. A waiting
-- ticket heavier than limit (SetLimit lowered it) is passed over; dead
-- waiting tickets met on the way are dropped. The holders hash lives at
-- least as long as the liveness granted (it may have just been emptied,
-- and so dropped, by the release that runs this: a new holder that never
-- confirms must not leave a key without an expiry). Each grant's fence is
-- the clock, above every fence held and the one kept while ahead beside
-- the given-back tokens (KEYS[4]), and above the grant before it; one
-- raised above the clock is kept there too (keep_fence_of).
local function fair_hand_over(now, us, limit, chan, confirm)
  local used, i = fair_held(KEYS[3], KEYS[7]), 0
  local last = false
  while used < limit do
    local w = redis.call('ZRANGE', KEYS[1], i, i)[1]
    if not w then return end
    if redis.call('HEXISTS', KEYS[3], w) == 1 then
      i = i + 1 -- counted in used
    else
      local n = weight_of(KEYS[7], w)
      local alive = redis.call('ZSCORE', KEYS[2], w)
      if alive and tonumber(alive) > now then
        if n <= limit then
          if used + n > limit then return end
          if not last then
            last = math.max(fair_top(KEYS[3]), tonumber(redis.pcall('ZSCORE', KEYS[4], '#')) or 0)
          end
          local f = next_fence(us, last)
          last = f
          local until_ms = math.min(tonumber(alive), now + confirm)
          redis.call('HSET', KEYS[3], w, f)
          keep(KEYS[3], until_ms - now)
          if f > us then keep_fence_of(KEYS[4], f, us) end
          redis.call('ZADD', KEYS[2], until_ms, w)
          local box = redis.call('HGET', KEYS[6], w)
          redis.call('HDEL', KEYS[6], w)
          redis.pcall('PUBLISH', box or chan, target(w, f, until_ms - now))
          used = used + n
        end
        i = i + 1
      else
        redis.call('ZREM', KEYS[1], w)
        redis.call('ZREM', KEYS[2], w)
        redis.call('HDEL', KEYS[5], w)
        redis.call('HDEL', KEYS[6], w)
        redis.call('HDEL', KEYS[7], w)
      end
    end
  end
end
