package primitives

import (
	"context"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/pubsub"
)

// The fair semaphore scripts. KEYS: 1 queue (zset token -> ticket, in
// arrival order), 2 liveness (zset token -> expiry in server ms: a holder's
// lease, or a waiter's last attempt plus the waiter timeout), 3 ticket
// counter, 4 fence counter, 5 holders (hash token -> fence), 6 recently
// released tokens, 7 holders' annotations (hash token ->
// latchkit.Request.Annotation), 8 waiters' inboxes (hash token -> the
// channel its process listens on for a hand-over, pubsub.Inbox).
//
// Holders are always among the first limit tickets: a ticket is granted
// only while its rank is below limit, and ranks only fall (new tickets join
// the back; expired and released ones leave), so the count of holders can
// never exceed the limit, whatever the clients' clocks say.
var (
	// ARGV: 1 token, 2 ttl ms, 3 limit, 4 waiter timeout ms, 5 "1" for a
	// Try (no ticket is left behind), 6 the inbox, 7 annotation. Reply
	// {1, fence} or
	// {0, hint ms, the annotation of the first holder in the queue}.
	fairAcquire = backend.NewScript(luaNow + luaFence + luaKeepAlive + `
local ttl, limit, wait = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ticket = redis.call('ZSCORE', KEYS[1], ARGV[1])
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
local c = redis.call('GET', KEYS[3])
if c and not tonumber(c) then return redis.error_reply('WRONGTYPE ticket counter is not an integer') end
local bad = fence_of(KEYS[4]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
redis.call('ZCARD', KEYS[6])
redis.call('HLEN', KEYS[8])
local keepall = function(ms)
  keep(KEYS[1], ms); keep(KEYS[2], ms); keep(KEYS[3], ms); keep(KEYS[5], ms); keep(KEYS[8], ms)
end
local function annotate()
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[7]); keep(KEYS[7], ttl) end
end
local function holder()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then return false end
  return redis.call('HGET', KEYS[7], first[1])
end
if myfence and alive and tonumber(alive) > now then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keepall(ttl); annotate()
  return {1, tonumber(myfence)}
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #dead do
  redis.call('ZREM', KEYS[1], dead[i])
  redis.call('HDEL', KEYS[5], dead[i])
  redis.call('HDEL', KEYS[7], dead[i])
  redis.call('HDEL', KEYS[8], dead[i])
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
if not ticket or not alive or tonumber(alive) <= now then
  if ARGV[5] == '1' and redis.call('ZCARD', KEYS[1]) >= limit then
    return {0, math.max(math.floor(wait / 3), 1), holder()}
  end
  ticket = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[1], ticket, ARGV[1])
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[8], ARGV[1], ARGV[6]) end
end
if redis.call('ZRANK', KEYS[1], ARGV[1]) < limit then
  redis.call('HDEL', KEYS[8], ARGV[1])
  local f = redis.call('INCR', KEYS[4])
  redis.call('HSET', KEYS[5], ARGV[1], f)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keepall(ttl); annotate()
  return {1, f}
end
redis.call('ZADD', KEYS[2], now + wait, ARGV[1])
keepall(wait)
return {0, math.max(math.floor(wait / 3), 1), holder()}`)

	// fairWithdraw takes a waiter that gave up out of the queue, which may
	// move the next ticket up, and gives back a permit a release handed it
	// meanwhile. ARGV as fairRelease. Reply 0.
	fairWithdraw = backend.NewScript(luaNow + luaFence + luaFairHandOver + `
local bad = fence_of(KEYS[4]); if bad then return bad end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('HDEL', KEYS[8], ARGV[1])
  hand_over()
end
return 0`)

	// ARGV: 1 token, 2 channel, 3 limit, 4 how long a handed-over permit
	// waits for its new holder to confirm, in ms. Reply 1 released (now or
	// before), 0 not held.
	fairRelease = backend.NewScript(luaNow + luaFence + luaFairHandOver + `
local bad = fence_of(KEYS[4]); if bad then return bad end
local f = redis.call('HGET', KEYS[5], ARGV[1])
if f then
  local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('HDEL', KEYS[8], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  hand_over()
  if not alive or tonumber(alive) <= now then return 0 end
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 60000)
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -1024)
  redis.call('ZADD', KEYS[6], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[6], 60000)
  return 1
end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 1 end
return 0`)

	// ARGV: 1 token, 2 ttl ms. Reply 1 extended, 0 not held.
	fairExtend = backend.NewScript(luaNow + luaKeepAlive + `
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 and alive and tonumber(alive) > now then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[2], ttl); keep(KEYS[3], ttl); keep(KEYS[5], ttl); keep(KEYS[7], ttl)
  return 1
end
return 0`)

	// ARGV: 1 token. Reply ms left, or -3.
	fairTTL = backend.NewScript(luaNow + `
local alive = redis.call('ZSCORE', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 and alive and tonumber(alive) > now then
  return tonumber(alive) - now
end
return -3`)
)

// luaFairHandOver defines hand_over(), run once a holder or a queued
// waiter has left: every live waiting ticket now among the first limit is
// granted its permit at once (fence, holder entry, at most ARGV[4] ms of
// liveness to confirm in) and woken alone by a targeted message carrying a
// digest of its token, on its process's inbox (without one: on the release
// channel); dead waiting tickets met on the way are dropped.
// Tickets of holders keep their rank. It needs luaNow; ARGV[2] is the
// channel, ARGV[3] the limit.
const luaFairHandOver = `
local function hand_over()
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
        redis.call('HSET', KEYS[5], w, redis.call('INCR', KEYS[4]))
        redis.call('ZADD', KEYS[2], math.min(tonumber(alive), now + confirm), w)
        local box = redis.call('HGET', KEYS[8], w)
        redis.call('HDEL', KEYS[8], w)
        redis.call('PUBLISH', box or ARGV[2], '=' .. string.sub(redis.sha1hex(w), 1, 16))
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
`

type fairSemaphore struct {
	b       backend.Backend
	kind    latchkit.Kind
	name    string
	cfg     config
	keys    []string
	channel string
	chans   []string // {channel}
	wchans  []string // {channel, inbox}: a waiting acquisition's
	args    []string // ttl, limit, waiter timeout, "0": a waiting attempt
	tryArgs []string // the same, ending "1": a Try leaves no ticket
	relArgs []string // release and withdraw ARGV after the token

	attemptFn, tryFn func(context.Context, *attempt) (latchkit.Lease, error)
	withdrawFn       func(context.Context, string) error
}

// NewFairSemaphore returns a semaphore of limit permits that grants them in
// arrival order: the seeds' counter-ranked fair semaphore, made FIFO and
// independent of client clocks. A waiter takes a ticket (a counter INCR)
// on its first attempt and keeps its place while it waits; its ticket is
// heartbeated by its attempts (every third of the waiter timeout, see
// WithWaiterTimeout), so an abandoned waiter drops out after the timeout.
// The first limit live tickets hold. It never over-grants and never
// starves a waiter. TryAcquire succeeds only when a permit is free and
// nobody is queued ahead, and leaves no ticket behind.
func NewFairSemaphore(b backend.Backend, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newFairSemaphore(latchkit.KindFairSemaphore, b, name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewFairMutex returns a Mutex that grants the lock in arrival order
// (Redisson's fair lock): a FairSemaphore of one permit, with the same
// lease semantics as a Mutex.
func NewFairMutex(b backend.Backend, name string, opts ...Option) (Mutex, error) {
	s, err := newFairSemaphore(latchkit.KindFairMutex, b, name, 1, opts)
	if err != nil {
		return nil, err
	}
	return fairMutex{s}, nil
}

type fairMutex struct{ s *fairSemaphore }

func (m fairMutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return m.s.acquire(ctx, false)
}

func (m fairMutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return m.s.acquire(ctx, true)
}

func newFairSemaphore(kind latchkit.Kind, b backend.Backend, name string, limit int, opts []Option) (*fairSemaphore, error) {
	cfg, err := newConfig(kind, b, name, opts)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, invalid("new", kind, name, "limit %d is below 1", limit)
	}
	base := KeyBase(cfg.prefix, name) + ":fair"
	inbox := pubsub.Inbox(b, base+":rel")
	s := &fairSemaphore{
		b: b, kind: kind, name: name, cfg: cfg,
		keys: []string{base + ":queue", base + ":alive", base + ":tickets",
			base + ":fence", base + ":holders", base + ":released", base + ":who", base + ":box"},
		channel: base + ":rel",
		chans:   []string{base + ":rel"},
		wchans:  []string{base + ":rel", inbox},
		args:    []string{ms(cfg.ttl), strconv.Itoa(limit), ms(cfg.waiterTimeout), "0", inbox},
		tryArgs: []string{ms(cfg.ttl), strconv.Itoa(limit), ms(cfg.waiterTimeout), "1", ""},
		relArgs: []string{base + ":rel", strconv.Itoa(limit), ms(min(cfg.ttl, cfg.waiterTimeout))},
	}
	s.attemptFn = scriptAttempt(b, fairAcquire, s.keys, s.args, s, kind, name, &s.cfg)
	s.tryFn = scriptAttempt(b, fairAcquire, s.keys, s.tryArgs, s, kind, name, &s.cfg)
	// The give-back of an acquisition that ended without a grant: its ticket
	// leaves the queue, and a permit it holds (granted by an attempt whose
	// reply was lost, or handed over) is passed on.
	s.withdrawFn = func(ctx context.Context, token string) error {
		_, err := s.b.Eval(ctx, fairWithdraw, s.keys, append([]string{token}, s.relArgs...))
		return err
	}
	return s, nil
}

func (s *fairSemaphore) Acquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, false)
}

func (s *fairSemaphore) TryAcquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, true)
}

func (s *fairSemaphore) acquire(ctx context.Context, try bool) (latchkit.Lease, error) {
	a := acquisition{op: "acquire", kind: s.kind, name: s.name, chans: s.wchans, try: try,
		attempt: s.attemptFn, giveBack: s.withdrawFn, queues: true, wakeID: true}
	if try {
		a.chans = s.chans
		a.attempt = s.tryFn
	}
	if s.kind == latchkit.KindFairMutex {
		a.op = "lock"
	}
	return s.cfg.acquire(ctx, s.b, a)
}

func (s *fairSemaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, s, token, ttl)
}

func (s *fairSemaphore) release(ctx context.Context, token string) (bool, error) {
	return flag(s.b.Eval(ctx, fairRelease, s.keys, append([]string{token}, s.relArgs...)))
}

func (s *fairSemaphore) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(s.b.Eval(ctx, fairTTL, s.keys, []string{token}))
}
