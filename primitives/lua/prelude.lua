-- The functions the scripts share. Each block starts with a line
-- "--@ name [uses other ...]"; a script names the blocks it needs in its
-- own "--@uses" line, and the loader (scripts.go) puts those blocks, and
-- the blocks they use, in front of it, in the order of this file.
--
-- Every script reads (and so type-checks) the keys it touches before it
-- writes anything: a key holding another type raises WRONGTYPE while
-- nothing has been changed yet. Where a script must write before it can
-- know, it uses redis.pcall and copes.

--@ now_ms
-- now_ms is the server's clock in milliseconds: every expiry and ordering
-- decision is made on it, never on a client's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

--@ fence_of
-- fence_of checks the fence counter at key without writing: nil when it is
-- absent or an integer, else the WRONGTYPE error reply to return.
local function fence_of(key)
  local f = redis.call('GET', key)
  if f and not tonumber(f) then
    return redis.error_reply('WRONGTYPE fence counter ' .. key .. ' is not an integer')
  end
  return nil
end

--@ keep
-- keep makes key live at least until ms from now, so that the keys of an
-- abandoned primitive disappear once its last holder or waiter expired.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

--@ digest
-- digest is what a hand-over's message names a waiter by: the first 16 hex
-- digits of the SHA-1 of its token (primitives.wakeID), never the token.
local function digest(tok)
  return string.sub(redis.sha1hex(tok), 1, $DIGEST_HEX)
end

--@ fence_ok
-- fence_ok reports whether the fence counter at key can be raised: absent
-- or an integer (never raises, whatever the key holds).
local function fence_ok(key)
  local f = redis.pcall('GET', key)
  return f == false or tonumber(f) ~= nil
end

--@ raise_fence
-- raise_fence raises the fence counter at key for a grant and returns the
-- grant's fence: one more than the counter, and never below the server's
-- clock in microseconds. The counter lives ret ms after its last grant
-- (the retention, primitives.WithRetention), and fences keep increasing
-- across its expiry and across a Redis that lost its data, as long as the
-- server's clock does not step back by more than the time since the last
-- grant. Every script that raises a fence takes the retention as its last
-- ARGV. On a counter holding something that is not an integer it writes
-- nothing and returns nil and the error reply.
local function raise_fence(key, ret)
  local f = redis.pcall('INCR', key)
  if type(f) == 'table' then return nil, f end
  local t = redis.call('TIME')
  f = math.max(f, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', key, string.format('%.0f', f), 'PX', ret)
  return f
end

--@ queue_len
-- queue_len is the length of a mutex's wait queue q (zset entry -> place)
-- with its liveness qlive (zset entry -> expiry, server ms), or 0 when
-- either holds another type: a queue written over by someone else is no
-- queue, and the lock is still freed.
local function queue_len(q, qlive)
  local n = redis.pcall('ZCARD', q)
  if type(n) ~= 'number' or n == 0 then return 0 end
  if type(redis.pcall('ZCARD', qlive)) ~= 'number' then return 0 end
  return n
end

--@ enqueue uses now_ms keep
-- enqueue puts entry at the back of the wait queue q (one more than the
-- last place, so arrival order holds whatever the server's clock does),
-- unless it is queued already, and marks it alive for wait ms: the waiter
-- heartbeats by attempting every third of it.
local function enqueue(q, qlive, entry, wait)
  local queued = redis.call('ZSCORE', q, entry)
  redis.call('ZSCORE', qlive, entry) -- type-checks qlive before any write
  if not queued then
    local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
    redis.call('ZADD', q, (tonumber(last[2]) or 0) + 1, entry)
  end
  redis.call('ZADD', qlive, now_ms() + wait, entry)
  keep(q, wait); keep(qlive, wait)
end

--@ dequeue
-- dequeue takes entry out of the wait queue, if it is there (a queue of
-- another type is left alone).
local function dequeue(q, qlive, entry)
  if redis.pcall('ZREM', q, entry) == 1 then redis.call('ZREM', qlive, entry) end
end

--@ hand_over uses now_ms digest queue_len fence_ok raise_fence
-- hand_over frees the mutex lock held by tok, KEYS[k] being the lock and
-- KEYS[k+1], KEYS[k+3], KEYS[k+5], KEYS[k+6] its fence counter,
-- annotation, wait queue and liveness (the Mutex key layout). It gives
-- the lock to the oldest live waiter that is not tok (dropping dead
-- entries, and tok's own, on the way): the lock key is set to that waiter's token for hand ms, the fence
-- raised, and the waiter alone woken by a message on its process's inbox
-- (the entry is "token inbox"; an entry without an inbox: on chan) naming
-- it by digest. Without a queue (a Redlock's keys: KEYS[k+5] absent) or
-- with an empty one, it deletes the lock; without a queue it also wakes a
-- waiter per process on chan. It returns true when it handed the lock over.
-- ret is the retention of the fence counter (see raise_fence).
local function hand_over(k, tok, chan, hand, ret)
  local q, qlive = KEYS[k+5], KEYS[k+6]
  if q and queue_len(q, qlive) > 0 and fence_ok(KEYS[k+1]) then
    local now = now_ms()
    while true do
      local head = redis.call('ZRANGE', q, 0, 0)[1]
      if not head then break end
      local alive = redis.call('ZSCORE', qlive, head)
      redis.call('ZREM', q, head)
      redis.call('ZREM', qlive, head)
      local t, box = string.match(head, '^(%S+) (.+)$')
      t = t or head
      if t ~= tok and alive and tonumber(alive) > now then
        raise_fence(KEYS[k+1], ret)
        redis.call('SET', KEYS[k], t, 'PX', hand)
        redis.call('DEL', KEYS[k+3])
        redis.call('PUBLISH', box or chan, '$TARGET' .. digest(t))
        return true
      end
    end
  end
  redis.call('DEL', KEYS[k], KEYS[k+3])
  if not q then redis.call('PUBLISH', chan, '$WAKE_ONE') end
  return false
end

--@ remember
-- remember notes tok in key, a zset of the tokens that recently finished
-- (released, or given back by an acquisition that ended without a grant),
-- scored by now: a retried release whose first reply was lost finds its
-- token there and reports success, and a late copy of an attempt whose
-- acquisition gave up finds it there and is refused, so it cannot leave a
-- grant nobody holds. It keeps the tokens of the last $MARKER_MS ms, at
-- most 1024.
local function remember(key, tok, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - $MARKER_MS)
  redis.call('ZREMRANGEBYRANK', key, 0, -1024)
  redis.call('ZADD', key, now, tok)
  redis.call('PEXPIRE', key, $MARKER_MS)
end

--@ fair_hand_over uses digest raise_fence
-- fair_hand_over runs once a FairSemaphore holder or queued waiter has
-- left (KEYS as fair_acquire; ARGV[2] the release channel, ARGV[3] the
-- limit, ARGV[4] how long a permit handed over waits for its new holder to
-- confirm, ms): every live waiting ticket now among the first limit is
-- granted its permit at once (fence, holder entry, at most ARGV[4] ms of
-- liveness to confirm in) and woken alone by a message on its process's
-- inbox (without one: on the release channel) naming it by digest; dead
-- waiting tickets met on the way are dropped. Tickets of holders keep
-- their rank. ARGV[5] is the fence counter's retention (see raise_fence).
local function fair_hand_over(now)
  local limit, confirm = tonumber(ARGV[3]), tonumber(ARGV[4])
  local i = 0
  while i < limit do
    local w = redis.call('ZRANGE', KEYS[1], i, i)[1]
    if not w then return end
    if redis.call('HEXISTS', KEYS[5], w) == 1 then
      i = i + 1
    else
      local alive = redis.call('ZSCORE', KEYS[2], w)
      if alive and tonumber(alive) > now then
        redis.call('HSET', KEYS[5], w, raise_fence(KEYS[4], ARGV[5]))
        redis.call('ZADD', KEYS[2], math.min(tonumber(alive), now + confirm), w)
        local box = redis.call('HGET', KEYS[8], w)
        redis.call('HDEL', KEYS[8], w)
        redis.call('PUBLISH', box or ARGV[2], '$TARGET' .. digest(w))
        i = i + 1
      else
        redis.call('ZREM', KEYS[1], w)
        redis.call('ZREM', KEYS[2], w)
        redis.call('HDEL', KEYS[7], w)
        redis.call('HDEL', KEYS[8], w)
      end
    end
  end
end

--@ latch_count
-- latch_count reads the count of the latch at key (a hash, see
-- latch_set.lua) without writing: 0 when the key does not exist (never
-- set, or expired), else its count; nil and a WRONGTYPE error reply to
-- return when the key is not a latch's (another type raises WRONGTYPE in
-- HGET; a hash without a count, or with a count that is not a
-- non-negative integer, is someone else's hash).
local function latch_count(key)
  local c = redis.call('HGET', key, 'count')
  if not c then
    if redis.call('EXISTS', key) == 0 then return 0 end
    return nil, redis.error_reply('WRONGTYPE latch ' .. key .. ' is a hash without a count')
  end
  if not string.match(c, '^%d+$') then
    return nil, redis.error_reply('WRONGTYPE latch count of ' .. key .. ' is not a non-negative integer')
  end
  return tonumber(c)
end
