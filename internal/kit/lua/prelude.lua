-- The functions the scripts of every primitive may share: the general
-- blocks. A package of primitives keeps the blocks private to its own
-- layouts in its lua/blocks.lua, in the same form; they may use these,
-- never the other way round. Each block starts with a line
-- "--@ name [uses other ...]"; a script names the blocks it needs in its
-- own "--@uses" line, and the loader (scripts.go) puts those blocks, and
-- the blocks they use, in front of it: these in the order of this file,
-- then its package's in the order of lua/blocks.lua.
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

--@ keep
-- keep makes key live at least until ms from now, so that the keys of an
-- abandoned primitive disappear once its last holder or waiter expired.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

--@ renew_first
-- renew_first is a renewal's first write: it makes key, which holds the
-- lease's entry, live at least until ms from now, and always writes. A
-- server at maxmemory (noeviction) refuses a script's command flagged
-- deny-oom (the ZADD that moves a holder's expiry) only while the script
-- has written nothing, and PEXPIRE is not flagged: a renewal, which grows
-- no memory (it rewrites what the lease holds), goes through out of memory.
local function renew_first(key, ms)
  redis.call('PEXPIRE', key, math.max(redis.call('PTTL', key), ms))
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

--@ heartbeat
-- heartbeat is the longest wait hint a waiting attempt is given, wait
-- being its waiter timeout in ms: a third of it, at least 1 ms, how often
-- it comes back to keep its place (Config.heartbeat in internal/kit
-- reckons the same).
local function heartbeat(wait)
  return math.max(math.floor(wait / 3), 1)
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

--@ keep_fence
-- keep_fence keeps fence f beside a name's given-back tokens (the zset
-- gone of a Semaphore, FairSemaphore or RWLock, member '#', scored by the
-- fence) while it is not behind the
-- server's clock us (µs): the name's next grant then takes a fence above
-- it (next_fence) although the lock that held it is gone. A grant calls it
-- for a fence it raised above its clock (a kept fence, a Redlock's
-- proposal), a release or hand-over for the fence of the lock it frees
-- when the clock has not moved past it (a clock that stands still, as a
-- test's may). It stays $MARKER_MS ms after the clock passes f. A fence
-- behind the clock needs no memory: the next grant's, never below the
-- clock, is above it, as long as the clock does not step back by more
-- than the time since that grant.
--
-- Its expiry is set, not only raised: f is above every fence kept before
-- (a grant's fence is above the kept one, a release's is the last
-- granted), so the new expiry is past what any of them needs, and past a
-- minute, what the given-back tokens need. Its writes are redis.pcall: on
-- a key holding another type the fence is not kept (nor that key's
-- expiry touched), and the next grant's falls back on the clock.
local function keep_fence(gone, f, us)
  if f < us then return end
  local ok = redis.pcall('ZADD', gone, f, '#')
  if type(ok) == 'table' and ok.err then return end
  redis.pcall('PEXPIRE', gone, $MARKER_MS + math.ceil((f - us) / 1000))
end

--@ next_fence
-- next_fence is the fence of a new grant of a name at the server's
-- time us: the clock in µs, above the fence kept while ahead (mark, the
-- '#' score of the finished tokens, or false), and never below least
-- (above the highest fence still held, see top_fence).
local function next_fence(us, mark, least)
  return math.max(us, (tonumber(mark) or -1) + 1, tonumber(least) or 0)
end

--@ keep_fence_of uses keep_fence
-- keep_fence_of is keep_fence for the fence f of one of several holders
-- (a Semaphore's, an RWLock's readers, a FairSemaphore's) as it leaves
-- while f is not behind the clock us: a fence kept before may be above f
-- (a holder granted after it, in the same µs), and the higher of the two
-- is kept, so that keep_fence's fence is above every fence kept before. f
-- nil (no fence) keeps nothing, and so does a gone of another type (not
-- latchkit's to write: the next grant's fence falls back on the clock).
local function keep_fence_of(gone, f, us)
  if not f or f < us then return end
  local kept = redis.pcall('ZSCORE', gone, '#')
  if type(kept) == 'table' then return end
  keep_fence(gone, math.max(f, tonumber(kept) or 0), us)
end

--@ fence_member
-- fence_member is the member that keeps holder tok's fence in the zset of
-- a Semaphore's holders or an RWLock's readers. Such a zset has two forms.
-- With several holders (the spread form), each holder's token is scored
-- by its expiry (server ms), and beside it '#' and the token is scored by
-- its grant's fence (server µs), so that the highest score is the highest
-- fence held. A lone holder granted on a name with no key (the lone form)
-- is kept as a Mutex keeps its lock: its token alone, scored by its fence,
-- and the key's expiry is the holder's (lone_of); a grant beside it
-- spreads it first (spread_lone). Scores below 1e14 are expiries (ms until
-- the year 5138), those from 1e14 up fences (µs since 1973): tokens are
-- hex, so no token starts with '#'.
local function fence_member(tok)
  return '#' .. tok
end

--@ lone_of
-- lone_of is the token and fence of the lone holder of the zset of
-- holders key (see fence_member), or nil when the zset is not in the lone
-- form. Its expiry is the key's: it lives while the key does.
local function lone_of(key)
  if redis.call('ZCARD', key) ~= 1 then return nil end
  local m = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local f = tonumber(m[2])
  if f < 1e14 or string.sub(m[1], 1, 1) == '#' then return nil end
  return m[1], f
end

--@ spread_lone uses fence_member lone_of
-- spread_lone turns the zset of holders key from the lone form into the
-- spread one (see fence_member): its holder's expiry, the key's, goes into
-- its score, and its fence beside it. now is the server's clock (ms).
local function spread_lone(key, now)
  local tok, f = lone_of(key)
  if tok then redis.call('ZADD', key, now + redis.call('PTTL', key), tok, f, fence_member(tok)) end
end

--@ holder_of uses fence_member
-- holder_of reads holder tok in the zset of holders key at now (server
-- ms), in either form (see fence_member): its expiry, its fence (nil for a
-- holder of latchkit 0.x) and whether it is a lone holder; nil when tok
-- holds no entry. A lone holder's expiry is the key's.
local function holder_of(key, tok, now)
  local s = tonumber(redis.call('ZSCORE', key, tok))
  if not s then return nil end
  if s >= 1e14 then return now + redis.call('PTTL', key), s, true end
  return s, tonumber(redis.call('ZSCORE', key, fence_member(tok))), false
end

--@ top_fence
-- top_fence is the highest fence in the zset of holders key (see
-- fence_member), either form, or false when no member keeps one.
local function top_fence(key)
  local f = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  if f and f >= 1e14 then return f end
  return false
end

--@ drop_dead uses fence_member
-- drop_dead takes the holders of the zset key (spread form) whose expiry
-- is at or before now, and their fence members, out, and returns their
-- tokens.
local function drop_dead(key, now)
  local dead = redis.call('ZRANGEBYSCORE', key, '-inf', now)
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    for i = 1, #dead do redis.call('ZREM', key, fence_member(dead[i])) end
  end
  return dead
end

--@ remember
-- remember notes tok in key, a zset of the tokens given back (by an
-- acquisition that ended without a grant, or with one it did not see: a
-- timeout, a give-up, a reply lost), scored by now: a late copy of such an
-- acquisition's attempt (stuck behind a paused server, resent by a
-- driver) finds its token there and is refused, so that it cannot leave a
-- grant nobody holds. Only those rare paths write it; a release remembers
-- nothing. Every kind keeps one such set per name (a Mutex's, Election's,
-- MultiLock name's and Redlock instance's is the layout's :gone key,
-- KEYS[5]), declared in the KEYS of every script that reads or writes it.
-- It keeps every token of the last $MARKER_MS ms, and only those: memory
-- follows the rate of give-backs, trimmed by every give-back and gone
-- with the key a window after the last. (A fence kept while ahead, member
-- '#', needs at most its lead, far below a minute, past now.)
local function remember(key, tok, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - $MARKER_MS)
  redis.call('ZADD', key, now, tok)
  redis.call('PEXPIRE', key, $MARKER_MS)
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
