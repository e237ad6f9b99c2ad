--@uses clock keep foreign_lock owner next_fence keep_fence fence_member lone_of spread_lone holder_of top_fence drop_dead
--@keys holders writer waiting gone who
-- The acquire of an RWLock reader.
-- KEYS: 1 readers (zset: token -> expiry, server ms, and '#' .. token ->
-- its fence, server µs; or, a lone reader, token -> its fence, the key's
-- expiry its own: see fence_member), 2 the writer ("token fence", PX
-- ttl, as a Mutex's lock: see lock_value), 3 waiting writers' intents
-- (zset token -> expiry), 4 the tokens given back in the last $MARKER_MS
-- ms (see remember), and under the member '#' the last fence while it is
-- not behind the server's clock: see keep_fence, 5 holders' annotations
-- (hash token -> annotation). (The layout's legacy keys are not passed.)
-- ARGV: kit's attempt header: 1 token, 2 ttl ms, 3 waiter timeout ms
-- (unused: a reader leaves nothing behind), 4 annotation ("" for none), 5
-- the retention ms (unused).
-- Reply: {1, fence} granted; {0, wait hint ms, the writer's annotation}
-- not (0: a token given back, refused). A waiting writer's intent keeps
-- new readers out. A grant's fence is the server's clock in µs, above
-- every fence the readers hold and the one kept while ahead; the first
-- reader of a name, without an annotation, is kept in the lone form (see
-- sem_acquire: nothing is written beside a lone reader, an annotation or
-- a writer's intent, without spreading it first).
--
-- The fast path is the grant, without an annotation, where no writer, no
-- writer's intent, no given-back token and no annotation exists, to a
-- token that does not hold, with no reader expired: the slow path's
-- grant, written out, with one TIME. On a name with no key at all (one
-- EXISTS for the five) it is TIME, ZADD and PEXPIRE (the lone form); when
-- the readers are the only key, their reads follow (the first type-checks
-- them), and a lone reader is spread. Any other case goes on to the slow
-- path.
if ARGV[4] == '' then
  local e = redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  local top = {}
  if e == 1 then top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') end
  if e == 0 then
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('ZADD', KEYS[1], us, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, us}
  elseif top[1] then -- the readers, the only key: not the token's, the earliest live
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local now = math.floor(us / 1000)
    local ttl = tonumber(ARGV[2])
    local f, tf = us, tonumber(top[2])
    if tf >= 1e14 then f = math.max(us, tf + 1) end
    if string.sub(top[1], 1, 1) ~= '#' and tf >= 1e14 then -- a lone reader (live: its key is)
      local pttl = redis.call('PTTL', KEYS[1])
      if top[1] ~= ARGV[1] and pttl > 0 then -- spread_lone, written out, and the grant
        redis.call('ZADD', KEYS[1], now + pttl, top[1], tf, '#' .. top[1], now + ttl, ARGV[1], f, '#' .. ARGV[1])
        if pttl < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
        if f > us then -- keep_fence, written out (no given-back token exists)
          redis.call('ZADD', KEYS[4], f, '#')
          redis.call('PEXPIRE', KEYS[4], $MARKER_MS + math.ceil((f - us) / 1000))
        end
        return {1, f}
      end
    else
      local free = true
      if redis.call('ZSCORE', KEYS[1], ARGV[1]) then free = false
      else free = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) > now end
      if free then
        redis.call('ZADD', KEYS[1], now + ttl, ARGV[1], f, '#' .. ARGV[1])
        if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
        if f > us then -- keep_fence, written out (no given-back token exists)
          redis.call('ZADD', KEYS[4], f, '#')
          redis.call('PEXPIRE', KEYS[4], $MARKER_MS + math.ceil((f - us) / 1000))
        end
        return {1, f}
      end
    end
  end
end
--@slow
local now, us = clock()
local ttl = tonumber(ARGV[2])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[4]); keep(KEYS[5], ttl) end
end
redis.call('ZCARD', KEYS[1]) -- type-checks the readers before any write
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[5])
local g = redis.call('ZMSCORE', KEYS[4], ARGV[1], '#')
if g[1] then return {0, 0, false} end
local exp, myfence, lone = holder_of(KEYS[1], ARGV[1], now)
if exp and exp > now then
  if lone and ARGV[4] == '' then redis.call('PEXPIRE', KEYS[1], ttl)
  else
    if lone then spread_lone(KEYS[1], now) end -- an annotation is not written beside a lone reader
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]); keep(KEYS[1], ttl)
  end
  annotate()
  return {1, myfence or 0}
end
if w then
  local pttl = redis.call('PTTL', KEYS[2])
  local foreign = foreign_lock(KEYS[2], pttl); if foreign then return foreign end
  return {0, pttl, redis.call('HGET', KEYS[5], owner(w))}
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local waiting = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #waiting > 0 then return {0, tonumber(waiting[2]) - now} end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local ltok, top = lone_of(KEYS[1]) -- a lone reader is live (its key is)
if not ltok then
  top = top_fence(KEYS[1])
  local dead = drop_dead(KEYS[1], now)
  for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]) end
end
local f = next_fence(us, g[2], top and top + 1)
if fresh and ARGV[4] == '' then -- the lone form
  redis.call('ZADD', KEYS[1], f, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  if ltok then spread_lone(KEYS[1], now) end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1], f, fence_member(ARGV[1]))
  keep(KEYS[1], ttl)
end
if f > us then keep_fence(KEYS[4], f, us) end
annotate()
return {1, f}
