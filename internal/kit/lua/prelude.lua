-- The functions the scripts share. Each block starts with a line
-- "--@ name [uses other ...]"; a script names the blocks it needs in its
-- own "--@uses" line, and the loader (scripts.go) puts those blocks, and
-- the blocks they use, in front of it, in the order of this file.
--
-- Every script reads (and so type-checks) the keys it touches before it
-- writes anything: a key holding another type raises WRONGTYPE while
-- nothing has been changed yet. Where a script must write before it can
-- know, it uses redis.pcall and copes, or undoes what it wrote. PUBLISH,
-- which the server refuses after the script may have written (an ACL that
-- does not grant the channel: a Redis 7 user's default), is always
-- redis.pcall: a message only saves a waiter time (one that misses it is
-- granted by its timer). So a script's error reply always means it wrote
-- nothing, and an acquisition that got one holds nothing
-- (primitives.definite).

--@ now_ms
-- now_ms is the server's clock in milliseconds: every expiry and ordering
-- decision is made on it, never on a client's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

--@ is_counter
-- is_counter reports whether the string s is a counter INCR takes and
-- raise_fence can raise: an integer written as Redis writes one (no sign
-- but '-', no leading zero, no '.', 'e' or '0x', which tonumber accepts
-- and INCR refuses), far from overflowing.
local function is_counter(s)
  return s == '0' or (#s <= 18 and string.find(s, '^%-?[1-9]%d*$') ~= nil)
end

--@ fence_of uses is_counter
-- fence_of checks the fence counter at key without writing: nil when it is
-- absent or a counter (raise_fence cannot fail on it), else the WRONGTYPE
-- error reply to return.
local function fence_of(key)
  local f = redis.call('GET', key)
  if f and not is_counter(f) then
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

--@ target uses digest
-- target is the message of a hand-over to tok: "=digest fence hand", the
-- new holder named by digest, then the grant's fence and how long the
-- server holds the grant from now, ms (a number or its string). A waiting acquisition holds on it
-- (primitives.handedLease), so hand_over and fair_hand_over both send it.
local function target(tok, f, hand)
  return '$TARGET' .. digest(tok) .. ' ' .. string.format('%.0f', f) .. ' ' .. string.format('%.0f', tonumber(hand))
end

--@ fence_ok uses is_counter
-- fence_ok reports whether the fence counter at key can be raised: absent
-- or a counter (never raises, whatever the key holds).
local function fence_ok(key)
  local f = redis.pcall('GET', key)
  return f == false or (type(f) == 'string' and is_counter(f))
end

--@ raise_fence
-- raise_fence raises the fence counter at key for a grant and returns the
-- grant's fence: one more than the counter, and never below the server's
-- clock in microseconds. The counter lives ret ms after its last grant
-- (the retention, primitives.WithRetention), and fences keep increasing
-- across its expiry and across a Redis that lost its data, as long as the
-- server's clock does not step back by more than the time since the last
-- grant. Every script that raises a fence takes the retention as its last
-- ARGV. A caller may propose a fence, least (a Redlock's attempt proposes
-- one above every counter and clock it expects, so that its instances
-- grant the same fence and none needs raising): the fence is never below
-- it either. On a counter holding something that is not an integer it
-- writes nothing and returns nil and the error reply.
local function raise_fence(key, ret, least)
  local f = redis.pcall('INCR', key)
  if type(f) == 'table' then return nil, f end
  local t = redis.call('TIME')
  f = math.max(f, tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(least) or 0)
  redis.call('SET', key, string.format('%.0f', f), 'PX', ret)
  return f
end

--@ invalid
-- invalid is the error reply of an argument the script refuses before it
-- writes anything; the Go side reads it as latchkit.ErrInvalid.
local function invalid(msg)
  return redis.error_reply('$INVALID ' .. msg)
end

--@ foreign_lock uses invalid
-- foreign_lock is, for a lock key (a string latchkit always writes with a
-- PX expiry) found holding someone else's value whose remaining time is
-- pttl (PTTL), the $INVALID reply refusing it when it has no expiry: then
-- latchkit did not write it, and reading it as held would wait for ever.
-- It is nil otherwise. It writes nothing.
local function foreign_lock(key, pttl)
  if pttl ~= -1 then return nil end
  return invalid('key ' .. key .. ' holds a value without expiry, which latchkit did not write: it writes every lock key with one')
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
-- dequeue takes entry out of the wait queue, if it is there (a queue or
-- liveness of another type is left alone).
local function dequeue(q, qlive, entry)
  if redis.pcall('ZREM', q, entry) == 1 then redis.pcall('ZREM', qlive, entry) end
end

--@ clock
-- clock is the server's clock twice: in milliseconds (as now_ms) and in
-- microseconds, from one TIME.
local function clock()
  local t = redis.call('TIME')
  local sec, us = tonumber(t[1]), tonumber(t[2])
  return sec * 1000 + math.floor(us / 1000), sec * 1000000 + us
end

--@ owner
-- owner is the token holding a mutex lock whose value is v ("token
-- fence", see lock_value; a bare token, as latchkit 0.x wrote it, is its
-- own owner), or false for no value.
local function owner(v)
  if not v then return false end
  local sp = string.find(v, ' ', 1, true)
  if sp then return string.sub(v, 1, sp - 1) end
  return v
end

--@ held_fence
-- held_fence is the fence in a mutex lock's value v, or nil (no value, or
-- a bare token).
local function held_fence(v)
  local sp = v and string.find(v, ' ', 1, true)
  if not sp then return nil end
  return tonumber(string.sub(v, sp + 1))
end

--@ lock_value
-- lock_value is what a mutex lock held by tok with fence f stores: the
-- holder's fence lives in the lock itself, so that a grant writes one key.
local function lock_value(tok, f)
  return tok .. ' ' .. string.format('%.0f', f)
end

--@ keep_fence
-- keep_fence keeps fence f, released at the server's time us (µs), beside
-- a mutex name's finished tokens (the zset gone, member '#', scored by the
-- fence) when it may be ahead of the clock (f >= us: the next grant may
-- run in the same µs): that grant takes a fence above it (next_fence)
-- although the lock that held it is gone. A grant calls it only for a
-- fence above its clock (f > us): the same name's next grant runs in a
-- later µs, after the lock's release (which calls it again) or expiry. It stays $MARKER_MS ms after the clock passes f. A
-- fence behind the clock needs no memory: the next grant's, never below
-- the clock, is above it, as long as the clock does not step back by more
-- than the time since that grant.
--
-- Its expiry is set, not only raised: f is above every fence kept before
-- (a grant's fence is above the kept one, a release's is the last
-- granted), so the new expiry is past what any of them needs, and past a
-- minute, what the finished tokens need.
local function keep_fence(gone, f, us)
  if f < us then return end
  redis.call('ZADD', gone, f, '#')
  redis.call('PEXPIRE', gone, $MARKER_MS + math.ceil((f - us) / 1000))
end

--@ next_fence
-- next_fence is the fence of a new grant of a mutex name at the server's
-- time us: the clock in µs, above the fence kept while ahead (mark, the
-- '#' score of the finished tokens, or false), and never below least
-- (see mutex_attempt).
local function next_fence(us, mark, least)
  return math.max(us, (tonumber(mark) or -1) + 1, tonumber(least) or 0)
end

--@ hand_over uses target queue_len lock_value held_fence keep_fence
-- hand_over frees the mutex lock held by tok, whose value is v, KEYS[k]
-- being the lock and KEYS[k+3], KEYS[k+4], KEYS[k+5], KEYS[k+6] its
-- annotation, finished tokens, wait queue and liveness (the Mutex key
-- layout); now and us are the server's clock (see clock). It gives the
-- lock to the oldest live waiter that is not tok (dropping dead entries,
-- and tok's own, on the way): the lock key is set to that waiter's token
-- and a fence above v's for hand ms, and the waiter alone woken by a
-- message on its process's inbox (the entry is "token inbox"; an entry
-- without an inbox: on chan) naming it by digest, followed by the grant's
-- fence and hand: "=digest fence hand". A waiting Mutex Lock holds on that
-- message alone, no attempt more, when the fence shows the hand-over came
-- after its last attempt (see mutex_attempt's reply). Without a queue (a
-- Redlock's keys: KEYS[k+5] absent) or with an empty one, it deletes the
-- lock; without a queue it also wakes a waiter per process on chan, unless
-- chan is '' (a Redlock's instances but the first, where nobody listens).
-- Either way the last fence is kept while it may be ahead of the clock
-- (keep_fence; when it deletes the lock, unless kept says the caller
-- kept v's fence already, see remember). When it handed the lock over it
-- returns the new holder's token, its fence and its queue entry;
-- otherwise false.
local function hand_over(k, tok, chan, hand, v, now, us, kept)
  local q, qlive = KEYS[k+5], KEYS[k+6]
  local prev = held_fence(v) or 0
  if q and queue_len(q, qlive) > 0 then
    while true do
      local head = redis.call('ZRANGE', q, 0, 0)[1]
      if not head then break end
      local alive = redis.call('ZSCORE', qlive, head)
      redis.call('ZREM', q, head)
      redis.call('ZREM', qlive, head)
      local t, box = string.match(head, '^(%S+) (.+)$')
      t = t or head
      if t ~= tok and alive and tonumber(alive) > now then
        local f = math.max(us, prev + 1)
        redis.call('SET', KEYS[k], lock_value(t, f), 'PX', hand)
        redis.call('DEL', KEYS[k+3])
        if f > us then keep_fence(KEYS[k+4], f, us) end
        redis.pcall('PUBLISH', box or chan, target(t, f, hand))
        return t, f, head
      end
    end
  end
  redis.call('DEL', KEYS[k], KEYS[k+3])
  if not kept then keep_fence(KEYS[k+4], prev, us) end
  if not q and chan ~= '' then redis.pcall('PUBLISH', chan, '$WAKE_ONE') end
  return false
end

--@ mutex_attempt uses enqueue dequeue foreign_lock clock owner held_fence lock_value keep_fence next_fence
-- mutex_attempt is one attempt at a mutex lock (KEYS 1-5, and 6-7 for a
-- waiting Lock: the Mutex key layout) by token tok for ttl ms, storing
-- note beside a grant ("" for none). tried says a fast path (mutex_acquire's)
-- already made this attempt's checks and its SET NX, and found the lock
-- held: what is left is the held case. A waiting Lock gives wait (the waiter
-- timeout, ms) and entry (its queue entry, "token inbox"); a single
-- attempt gives false for both. least, when given, is the least fence a
-- grant takes (a Redlock's attempt proposes one above every fence and
-- clock it expects, so that its instances grant the same fence and none
-- needs raising). It returns the reply of mutex_acquire: {1, fence}
-- granted; {0, wait hint ms, the holder's annotation or false} held, and
-- for a waiting Lock a fourth element, the holder's fence as a string
-- (false when unknown): a hand-over message with a greater fence was sent
-- after this attempt ran.
--
-- A grant's fence (next_fence) is the server's clock in microseconds,
-- above any fence kept beside the finished tokens while ahead of it, and
-- is stored in the lock's value (lock_value). A token given back is
-- refused: this is a late copy of an attempt whose acquisition has ended.
-- A waiting Lock that finds the lock held queues, or heartbeats its
-- place. Whenever it is granted, its entry leaves the queue: also when an
-- earlier try of this attempt queued it and a resent copy wins the lock.
-- Finding its own token means an earlier try of this attempt got through
-- (its reply was lost), or a release handed the lock over: granted, with
-- the TTL refreshed.
local function mutex_attempt(tok, ttl, note, wait, entry, least, tried)
  if not tried then
    local g = redis.call('ZMSCORE', KEYS[5], tok, '#')
    if g[1] then return {0, 0, false} end
    if note ~= '' then redis.call('GET', KEYS[4]) end -- type-checks the annotation before any write
    local _, us = clock()
    local f = next_fence(us, g[2], least)
    if redis.call('SET', KEYS[1], lock_value(tok, f), 'NX', 'PX', ttl) then
      if f > us then keep_fence(KEYS[5], f, us) end -- see keep_fence
      if note ~= '' then redis.call('SET', KEYS[4], note, 'PX', ttl) end
      if wait then dequeue(KEYS[6], KEYS[7], entry) end
      return {1, f}
    end
  end
  local v = redis.call('GET', KEYS[1])
  if owner(v) == tok then
    redis.call('PEXPIRE', KEYS[1], ttl)
    if note ~= '' then redis.call('SET', KEYS[4], note, 'PX', ttl) end
    if wait then dequeue(KEYS[6], KEYS[7], entry) end
    return {1, held_fence(v) or 0}
  end
  local hint = redis.call('PTTL', KEYS[1])
  local foreign = foreign_lock(KEYS[1], hint); if foreign then return foreign end
  local who = redis.call('GET', KEYS[4])
  if wait then
    wait = tonumber(wait)
    enqueue(KEYS[6], KEYS[7], entry, wait)
    hint = math.min(hint, math.max(math.floor(wait / 3), 1))
    local fc = held_fence(v)
    return {0, hint, who, fc and string.format('%.0f', fc) or false}
  end
  return {0, hint, who}
end

--@ remember
-- remember notes tok in key, a zset of the tokens that recently finished
-- (released, or given back by an acquisition that ended without a grant),
-- scored by now: a retried release whose first reply was lost finds its
-- token there and reports success, and a late copy of an attempt whose
-- acquisition ended (given up, or granted and released) finds it there
-- and is refused, so it cannot leave a grant nobody holds. Every kind
-- keeps one such set per name (a Mutex's, Election's, MultiLock name's
-- and Redlock instance's is the layout's :gone key, KEYS[5]), declared in
-- the KEYS of every script that reads or writes it. It keeps every token of the last $MARKER_MS ms, and
-- only those: any fixed cap on their number would forget a token within
-- the window once more finished after it (a retried release reported
-- lost, a late attempt granted to nobody). Memory follows the rate: one
-- entry per token finished in the window (about 160 bytes once the set
-- is past 128 entries, far less below), trimmed by every call and gone
-- with the key a window after the last.
--
-- A Mutex-layout release passes its lock's fence f and the clock in µs,
-- us: when the fence may be ahead of the clock it is kept in the same
-- write (see keep_fence).
local function remember(key, tok, now, f, us)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - $MARKER_MS)
  if f and f >= us then
    redis.call('ZADD', key, now, tok, f, '#')
    redis.call('PEXPIRE', key, $MARKER_MS + math.ceil((f - us) / 1000))
    return
  end
  redis.call('ZADD', key, now, tok)
  redis.call('PEXPIRE', key, $MARKER_MS)
end

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

--@ fair_hand_over uses keep target raise_fence weight_of fair_held
-- fair_hand_over runs once a FairSemaphore holder or queued waiter has
-- left, or its limit was raised (KEYS as fair_acquire): starting from the
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
-- confirms must not leave a key without an expiry). ret is the fence
-- counter's retention (see raise_fence).
local function fair_hand_over(now, limit, chan, confirm, ret)
  local used, i = fair_held(KEYS[5], KEYS[9]), 0
  while used < limit do
    local w = redis.call('ZRANGE', KEYS[1], i, i)[1]
    if not w then return end
    if redis.call('HEXISTS', KEYS[5], w) == 1 then
      i = i + 1 -- counted in used
    else
      local n = weight_of(KEYS[9], w)
      local alive = redis.call('ZSCORE', KEYS[2], w)
      if alive and tonumber(alive) > now then
        if n <= limit then
          if used + n > limit then return end
          local f = raise_fence(KEYS[4], ret)
          local until_ms = math.min(tonumber(alive), now + confirm)
          redis.call('HSET', KEYS[5], w, f)
          keep(KEYS[5], until_ms - now)
          redis.call('ZADD', KEYS[2], until_ms, w)
          local box = redis.call('HGET', KEYS[8], w)
          redis.call('HDEL', KEYS[8], w)
          redis.pcall('PUBLISH', box or chan, target(w, f, until_ms - now))
          used = used + n
        end
        i = i + 1
      else
        redis.call('ZREM', KEYS[1], w)
        redis.call('ZREM', KEYS[2], w)
        redis.call('HDEL', KEYS[7], w)
        redis.call('HDEL', KEYS[8], w)
        redis.call('HDEL', KEYS[9], w)
      end
    end
  end
end

--@ seat
-- seat records value as the leader with fence f in the seat key (a hash
-- {v, f}, expiring in ms with the lock) and, when the seat changed hands,
-- tells observers on chan: "L<fence> <ms> <value>".
local function seat(key, chan, f, value, ms)
  local cur = redis.call('HGET', key, 'f')
  redis.call('HSET', key, 'v', value)
  redis.call('HSET', key, 'f', string.format('%.0f', f))
  redis.call('PEXPIRE', key, ms)
  if tonumber(cur) ~= tonumber(f) then
    redis.pcall('PUBLISH', chan, 'L' .. string.format('%.0f', f) .. ' ' .. ms .. ' ' .. value)
  end
end

--@ unseat
-- unseat empties the seat key and tells observers on chan: "E<fence>", the
-- fence of the leader that left.
local function unseat(key, chan)
  local f = redis.call('HGET', key, 'f')
  redis.call('DEL', key)
  if f then redis.pcall('PUBLISH', chan, 'E' .. f) end
end

--@ pass_seat uses seat unseat
-- pass_seat follows a leader's lock leaving (released or given back): when
-- hand_over gave it to the candidate of queue entry entry, with fence f,
-- that candidate is seated for hand ms (its value is in the candidates'
-- hash KEYS[9]); otherwise the seat is emptied.
local function pass_seat(t, f, entry, hand, chan)
  if t then
    local v = redis.call('HGET', KEYS[9], entry)
    redis.call('HDEL', KEYS[9], entry)
    if v then
      seat(KEYS[8], chan, f, v, hand)
      return
    end
  end
  unseat(KEYS[8], chan)
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

--@ companion
-- companion runs cmd on key, a companion of a lease: a key its renewal
-- touches but does not declare, named in ARGV ('' or nil for none), since
-- it may be absent while the lease lives (an annotation, weights, a
-- counter). A renewal declares as KEYS only keys that hold the lease's own
-- token or entry, which exist as long as it does: while a Cluster slot is
-- MIGRATING, its master serves a script only if it has every key the
-- script declares (TRYAGAIN when it has some of them), and a renewal
-- declaring a key that happens to be absent fails until the keys have
-- moved, so that a lease shorter than the migration is lost although its
-- keys never moved. Inside the script, the migrating master refuses a
-- command on a key it does not have: there is none of it here to touch,
-- and companion returns false (so it does for '' and nil). A key of
-- another type raises WRONGTYPE, as redis.call does.
local function companion(cmd, key, ...)
  if not key or key == '' then return false end
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then error(r) end
    return false
  end
  return r
end

--@ keep_companion uses companion
-- keep_companion is keep for a companion (see companion): it makes key,
-- where it exists, live at least until ms from now.
local function keep_companion(key, ms)
  local d = companion('PTTL', key)
  if d and d < ms then companion('PEXPIRE', key, ms) end
end
