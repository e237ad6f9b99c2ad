-- The blocks private to the primitives of this package (see
-- internal/kit/lua/prelude.lua for the general ones and the form), in
-- this file and the lua/blocks_*.lua files: here the lock key of the
-- Mutex layout, its value and its hand-over (Mutex, ReentrantMutex,
-- MultiLock, Redlock, Election), the Mutex's attempt and a RWLock's
-- writer.

--@ lock_read
-- lock_read reads v, the value of a mutex-layout lock key (see
-- keyspace.MutexLayout), at the server's time now (ms; nil: not checked):
-- "owner fence[ flag...]", the owner the holder's token, or '~' for a free
-- marker, which keeps the name's last fence, and its flags, for a while.
-- A bare token (latchkit 0.x) is its own owner, with no fence. It returns
-- the owner (false when the key is absent, a marker, or past its holder's
-- logical expiry), the fence (nil when none) and the flags, a table:
--   a      an annotation is stored beside the holder (KEYS[k+3]);
--   q      the wait queue may hold entries: a release looks (hand_over);
--   ahead  the fence was ahead of the server's clock at its grant ('>');
--   g      server ms until which tokens given back are in the given-back
--          set (KEYS[k+4]): an acquire checks them ("g<ms>");
--   till   the holder's logical expiry, server ms, when the key lives
--          longer than the hold ("@<ms>"; see put_lock).
-- Only slow paths call it: a fast path reads a value without flags by a
-- pattern, and leaves the rest to the slow path.
local function lock_read(v, now)
  if not v then return false, nil, {} end
  local o, f, rest = string.match(v, '^(%S+) (%d+)(.*)$')
  if not o then return v, nil, {} end
  local fl = {}
  for w in string.gmatch(rest, '%S+') do
    local c = string.sub(w, 1, 1)
    if c == 'a' then fl.a = true
    elseif c == 'q' then fl.q = true
    elseif c == '>' then fl.ahead = true
    elseif c == 'g' then fl.g = tonumber(string.sub(w, 2))
    elseif c == '@' then fl.till = tonumber(string.sub(w, 2)) end
  end
  if now and fl.g and fl.g <= now then fl.g = nil end
  if o == '~' or (now and fl.till and fl.till <= now) then o = false end
  return o, tonumber(f), fl
end

--@ lock_value
-- lock_value is the value a mutex-layout lock key holds (see lock_read):
-- o (a token, or '~'), the fence f, then the flags of fl; without fl,
-- "token fence" alone (an RWLock's writer key).
local function lock_value(o, f, fl)
  fl = fl or {}
  local s = o .. ' ' .. string.format('%.0f', f)
  if fl.a then s = s .. ' a' end
  if fl.q then s = s .. ' q' end
  if fl.ahead then s = s .. ' >' end
  if fl.g then s = s .. ' g' .. string.format('%.0f', fl.g) end
  if fl.till then s = s .. ' @' .. string.format('%.0f', fl.till) end
  return s
end

--@ put_lock uses lock_value
-- put_lock writes the lock key key: held by o (a token) for ms, or a free
-- marker (o '~') for ms, with fence f and the flags of fl (at the server's
-- time now, in ms, and us, in µs). The key lives as long as what its value
-- keeps needs: until the given-back window ends (fl.g), and, for a fence
-- ahead of the clock, until the clock passes it, so that the name's next
-- grant takes a fence above it also once the lock is free. A holder's key
-- that must outlive its hold gets a logical expiry (fl.till): past it,
-- the value reads as a marker (lock_read). A release leaves a marker of
-- 1 ms when the clock has not passed its fence (a clock that stands
-- still, as a test's does: the marker stays until it moves, and the next
-- grant still takes a fence above it). old, when given, is the key's
-- value now.
local function put_lock(key, o, f, fl, ms, now, us, old)
  ms = tonumber(ms)
  local life = ms
  fl.ahead = f > us or nil
  if fl.ahead then life = math.max(life, math.ceil((f - us) / 1000) + 1) end
  if fl.g then life = math.max(life, fl.g - now) end
  fl.till = nil
  if o ~= '~' then
    if life > ms then fl.till = now + ms end
  else
    fl.a, fl.q = nil, nil
  end
  local v = lock_value(o, f, fl)
  if v == old then
    -- A renewal that changes no flag: PEXPIRE, which a server out of
    -- memory (maxmemory, noeviction) does not refuse, as it does SET.
    redis.call('PEXPIRE', key, life)
  else
    redis.call('SET', key, v, 'PX', life)
  end
end

--@ owner
-- owner is the token holding a lock whose value is v ("token fence", as
-- an RWLock's writer key holds it, see lock_value; a bare token, as
-- latchkit 0.x wrote it, is its own owner), or false for no value.
local function owner(v)
  if not v then return false end
  local sp = string.find(v, ' ', 1, true)
  if sp then return string.sub(v, 1, sp - 1) end
  return v
end

--@ held_fence
-- held_fence is the fence in a lock value v of the "token fence" form
-- (see owner), or nil (no value, or a bare token).
local function held_fence(v)
  local sp = v and string.find(v, ' ', 1, true)
  if not sp then return nil end
  return tonumber(string.sub(v, sp + 1))
end

--@ holders_in
-- holders_in is the number of holders in the zset of holders key, in the
-- spread form (see fence_member): its members scored below 1e14.
local function holders_in(key)
  return redis.call('ZCOUNT', key, '-inf', '(100000000000000')
end

--@ hand_over uses target queue_len lock_read put_lock
-- hand_over frees the mutex lock held by tok, whose value is v, KEYS[k]
-- being the lock and KEYS[k+3], KEYS[k+5], KEYS[k+6] its annotation, wait
-- queue and liveness (the Mutex key layout); now and us are the server's
-- clock (see clock). It gives the lock to the oldest live waiter that is
-- not tok (dropping dead entries, and tok's own, on the way): the lock key
-- is set to that waiter's token and a fence above v's for hand ms
-- (flagged q while more wait), and the waiter alone woken by a message on
-- its process's inbox (the entry is "token inbox"; an entry without an
-- inbox: on chan) naming it by digest, followed by the grant's fence and
-- hand: "=digest fence hand". A waiting Mutex Lock holds on that message
-- alone, no attempt more, when the fence shows the hand-over came after
-- its last attempt (see mutex_attempt's reply). Without a queue (a
-- Redlock's keys: KEYS[k+5] absent) or with an empty one, it deletes the
-- lock, or leaves a free marker of the fence (put_lock) when the fence is
-- not behind the clock or tokens were given back; without a queue it also wakes a waiter
-- per process on chan, unless chan is '' (a Redlock's instances but the
-- first, where nobody listens). The given-back window of v (flag g) goes
-- with the name, extended to gone (server ms) when given. When it handed
-- the lock over it returns the new holder's token, its fence and its
-- queue entry; otherwise false.
local function hand_over(k, tok, chan, hand, v, now, us, gone)
  local q, qlive = KEYS[k+5], KEYS[k+6]
  local _, prev, fl = lock_read(v, now)
  prev = prev or 0
  local g = fl.g
  if gone then g = math.max(g or 0, gone) end
  redis.call('DEL', KEYS[k+3])
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
        put_lock(KEYS[k], t, f, {g = g, q = queue_len(q, qlive) > 0 or nil}, hand, now, us)
        redis.pcall('PUBLISH', box or chan, target(t, f, hand))
        return t, f, head
      end
    end
  end
  if g or prev >= us then
    put_lock(KEYS[k], '~', prev, {g = g}, 1, now, us)
  else
    redis.call('DEL', KEYS[k])
  end
  if not q and chan ~= '' then redis.pcall('PUBLISH', chan, '$WAKE_ONE') end
  return false
end

--@ mutex_attempt uses heartbeat enqueue dequeue foreign_lock clock queue_len lock_read lock_value put_lock
-- mutex_attempt is one attempt at a mutex lock (KEYS 1-5, and 6-7 for a
-- waiting Lock: the Mutex key layout) by token tok for ttl ms, storing
-- note beside a grant ("" for none). A waiting Lock gives wait (the waiter
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
-- A grant's fence is the server's clock in microseconds, above the last
-- fence the name's lock key keeps (a free marker's: see put_lock), and
-- is stored in the lock's value. While the name's key says tokens were
-- given back (flag g), a token among them is refused, and does not queue
-- behind a holder: this is a late copy of an attempt whose acquisition has
-- ended. A waiting Lock that finds the lock held queues, or heartbeats its place, and flags the holder's value
-- (q) so that its release looks at the queue. Whenever it is granted, its
-- entry leaves the queue: also when an earlier try of this attempt queued
-- it and a resent copy wins the lock. Finding its own token means an
-- earlier try of this attempt got through (its reply was lost), or a
-- release handed the lock over: granted, with the TTL refreshed.
local function mutex_attempt(tok, ttl, note, wait, entry, least)
  local now, us = clock()
  local v = redis.call('GET', KEYS[1])
  local o, f, fl = lock_read(v, now)
  if note ~= '' then redis.call('GET', KEYS[4]) end -- type-checks the annotation before any write
  if o == tok then
    if f then
      fl.a = fl.a or (note ~= '' or nil)
      put_lock(KEYS[1], tok, f, fl, ttl, now, us, v)
    else
      redis.call('PEXPIRE', KEYS[1], ttl)
    end
    if note ~= '' then redis.call('SET', KEYS[4], note, 'PX', ttl) end
    if wait then dequeue(KEYS[6], KEYS[7], entry) end
    return {1, f or 0}
  end
  if o then
    local hint = redis.call('PTTL', KEYS[1])
    local foreign = foreign_lock(KEYS[1], hint); if foreign then return foreign end
    if fl.till then hint = fl.till - now end
    local who = fl.a and redis.call('GET', KEYS[4]) or false
    if wait then
      if fl.g and redis.call('ZSCORE', KEYS[5], tok) then return {0, 0, false} end
      wait = tonumber(wait)
      enqueue(KEYS[6], KEYS[7], entry, wait)
      if f and not fl.q then
        fl.q = true
        redis.call('SET', KEYS[1], lock_value(o, f, fl), 'KEEPTTL')
      end
      hint = math.min(hint, heartbeat(wait))
      return {0, hint, who, f and string.format('%.0f', f) or false}
    end
    return {0, hint, who}
  end
  if fl.g and redis.call('ZSCORE', KEYS[5], tok) then return {0, 0, false} end
  local nf = math.max(us, (f or -1) + 1, tonumber(least) or 0)
  if wait then dequeue(KEYS[6], KEYS[7], entry) end
  local nfl = {g = fl.g, a = note ~= '' or nil}
  if KEYS[6] and queue_len(KEYS[6], KEYS[7]) > 0 then nfl.q = true end
  put_lock(KEYS[1], tok, nf, nfl, ttl, now, us)
  if note ~= '' then redis.call('SET', KEYS[4], note, 'PX', ttl) end
  return {1, nf}
end

--@ flag_given_back uses put_lock
-- flag_given_back flags the lock key key (g, see lock_read) until gone,
-- the end of the window in which a token just given back (remember) has
-- its late attempt refused: a key held by another token keeps its hold's
-- end as a logical expiry, a free marker is rewritten with the flag, and
-- an absent key gets a marker that lasts the window. v is the key's value
-- and o, f, fl what lock_read made of it.
local function flag_given_back(key, v, o, f, fl, gone, now, us)
  if f then
    fl.g = math.max(fl.g or 0, gone)
    if o then
      local left = fl.till and fl.till - now or redis.call('PTTL', key)
      if left > 0 then put_lock(key, o, f, fl, left, now, us) end
    else
      put_lock(key, '~', f, fl, 1, now, us)
    end
  elseif not v then
    put_lock(key, '~', 0, {g = gone}, 1, now, us)
  end
end
