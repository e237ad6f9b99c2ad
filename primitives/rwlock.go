package primitives

import (
	"context"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// RWLock is held by many readers or by one writer.
type RWLock interface {
	// RLock waits until a read lease is granted or ctx is done.
	RLock(ctx context.Context) (latchkit.Lease, error)
	// TryRLock makes one attempt at a read lease.
	TryRLock(ctx context.Context) (latchkit.Lease, error)
	// Lock waits until the write lease is granted or ctx is done.
	Lock(ctx context.Context) (latchkit.Lease, error)
	// TryLock makes one attempt at the write lease.
	TryLock(ctx context.Context) (latchkit.Lease, error)
}

// DefaultWaiterTimeout is how long a waiter's place (a writer's intent on
// an RWLock, a ticket in a FairSemaphore) outlives its last attempt when
// WithWaiterTimeout is not given. A waiting Lock re-attempts at a third of
// it, so a live waiter never loses its place; an abandoned one (its process
// gone) stops blocking others after it.
const DefaultWaiterTimeout = 3 * time.Second

// The RWLock scripts. KEYS: 1 readers (zset token -> expiry, server ms),
// 2 writer (string token, PX ttl), 3 waiting writers (zset token -> expiry
// of the intent), 4 fence counter, 5 fences (hash token -> fence),
// 6 recently released tokens, 7 holders' annotations (hash token ->
// latchkit.Request.Annotation).
var (
	// ARGV: 1 token, 2 ttl ms, 3 annotation. Reply {1, fence} or {0, wait
	// hint ms, the writer's annotation}.
	rwRead = backend.NewScript(luaNow + luaFence + luaKeepAlive + `
local ttl = tonumber(ARGV[2])
local function annotate()
  if ARGV[3] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[3]); keep(KEYS[7], ttl) end
end
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
local bad = fence_of(KEYS[4]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
redis.call('ZCARD', KEYS[6])
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[5], ttl); annotate()
  return {1, tonumber(myfence or '0')}
end
if w then return {0, redis.call('PTTL', KEYS[2]), redis.call('HGET', KEYS[7], w)} end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local waiting = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #waiting > 0 then return {0, tonumber(waiting[2]) - now} end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]); redis.call('HDEL', KEYS[7], dead[i]) end
end
local f = redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], f)
keep(KEYS[1], ttl); keep(KEYS[5], ttl); annotate()
return {1, f}`)

	// ARGV: 1 token, 2 ttl ms, 3 intent ms (0: do not queue, a TryLock),
	// 4 annotation. Reply {1, fence} or {0, wait hint ms, the annotation
	// of the holder waited for}. A writer that finds readers (or another
	// writer) leaves its intent, which keeps new readers out.
	rwWrite = backend.NewScript(luaNow + luaFence + luaKeepAlive + `
local ttl, intent = tonumber(ARGV[2]), tonumber(ARGV[3])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[7], ARGV[1], ARGV[4]); keep(KEYS[7], ttl) end
end
redis.call('ZCARD', KEYS[1])
local w = redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
local bad = fence_of(KEYS[4]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[5], ARGV[1])
redis.call('ZCARD', KEYS[6])
if w == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ttl)
  annotate()
  return {1, tonumber(myfence or '0')}
end
local function queue(hint, holder)
  if intent > 0 then
    redis.call('ZADD', KEYS[3], now + intent, ARGV[1])
    keep(KEYS[3], intent)
    hint = math.min(hint, math.floor(intent / 3))
  end
  return {0, math.max(hint, 1), redis.call('HGET', KEYS[7], holder)}
end
if w then return queue(redis.call('PTTL', KEYS[2]), w) end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[5], dead[i]); redis.call('HDEL', KEYS[7], dead[i]) end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then return queue(tonumber(first[2]) - now, first[1]) end
local f = redis.call('INCR', KEYS[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], f)
keep(KEYS[5], ttl); annotate()
return {1, f}`)

	// ARGV: 1 token, 2 channel. The give-back of a writer whose Lock
	// ended without a grant: its intent is withdrawn, and the write lock
	// is released if the token holds it (an attempt whose reply was lost).
	// Readers kept out by the intent are woken when it was the last.
	rwWithdraw = backend.NewScript(`
local w = redis.call('GET', KEYS[2])
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and redis.call('ZCARD', KEYS[3]) == 0 then
  redis.call('PUBLISH', ARGV[2], '*')
end
if w == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('PUBLISH', ARGV[2], '*')
end
return 0`)

	// ARGV: 1 token, 2 channel. Reply 1 released (now or before), 0 not
	// held. The last reader's release wakes everyone waiting.
	rwReadRelease = backend.NewScript(luaNow + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  if tonumber(exp) <= now then return 0 end
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 60000)
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -1024)
  redis.call('ZADD', KEYS[6], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[6], 60000)
  if redis.call('ZCOUNT', KEYS[1], now + 1, '+inf') == 0 then redis.call('PUBLISH', ARGV[2], '*') end
  return 1
end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 1 end
return 0`)

	// ARGV: 1 token, 2 channel.
	rwWriteRelease = backend.NewScript(luaNow + `
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 60000)
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -1024)
  redis.call('ZADD', KEYS[6], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[6], 60000)
  redis.call('PUBLISH', ARGV[2], '*')
  return 1
end
if redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 1 end
return 0`)

	// ARGV: 1 token, 2 ttl ms. Reply 1 extended, 0 not held.
	// A reader's extend is the semaphore's, given the readers, fences and
	// annotations as its KEYS[1], KEYS[3] and KEYS[5].
	rwReadExtend  = semExtend
	rwWriteExtend = backend.NewScript(luaKeepAlive + `
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  keep(KEYS[7], tonumber(ARGV[2]))
  return 1
end
return 0`)

	// ARGV: 1 token. Reply ms left, or -3.
	rwReadTTL  = semTTL
	rwWriteTTL = backend.NewScript(`
if redis.call('GET', KEYS[2]) == ARGV[1] then return redis.call('PTTL', KEYS[2]) end
return -3`)
)

type rwlock struct {
	b       backend.Backend
	name    string
	cfg     config
	keys    []string
	channel string
	chans   []string // {channel}
	ttlArg  string
	intent  string

	readFn, writeFn, tryWriteFn func(context.Context, *attempt) (latchkit.Lease, error)
	readBackFn, writeBackFn     func(context.Context, string) error
}

// NewRWLock returns a readers-writer lock named name on b: many readers or
// one writer. Each reader holds its own expiry (in the server's time), so a
// crashed reader blocks writers for at most its TTL. It prefers writers: a
// writer that finds the lock read-held leaves an intent that keeps new
// readers out until it has had its turn, so a stream of readers cannot
// starve it; an intent outlives its writer's last attempt by the waiter
// timeout (WithWaiterTimeout), so an abandoned writer does not block readers
// for longer. Read and write grants take fences from one counter.
func NewRWLock(b backend.Backend, name string, opts ...Option) (RWLock, error) {
	cfg, err := newConfig(latchkit.KindReadLock, b, name, opts)
	if err != nil {
		return nil, err
	}
	base := KeyBase(cfg.prefix, name) + ":rw"
	rw := &rwlock{
		b: b, name: name, cfg: cfg,
		keys: []string{base + ":readers", base + ":writer", base + ":waiting",
			base + ":fence", base + ":fences", base + ":released", base + ":who"},
		channel: base + ":rel",
		chans:   []string{base + ":rel"},
		ttlArg:  ms(cfg.ttl),
		intent:  ms(cfg.waiterTimeout),
	}
	rw.readFn = scriptAttempt(b, rwRead, rw.keys, []string{rw.ttlArg}, rwReader{rw}, latchkit.KindReadLock, name, &rw.cfg)
	rw.writeFn = scriptAttempt(b, rwWrite, rw.keys, []string{rw.ttlArg, rw.intent}, rwWriter{rw}, latchkit.KindWriteLock, name, &rw.cfg)
	rw.tryWriteFn = scriptAttempt(b, rwWrite, rw.keys, []string{rw.ttlArg, "0"}, rwWriter{rw}, latchkit.KindWriteLock, name, &rw.cfg)
	// The give-backs of an acquisition that ended without a grant: a read
	// lease the token may hold; a writer's intent, and the write lock it may
	// hold.
	rw.readBackFn = func(ctx context.Context, token string) error {
		_, err := rwReader{rw}.release(ctx, token)
		return err
	}
	rw.writeBackFn = func(ctx context.Context, token string) error {
		_, err := rw.b.Eval(ctx, rwWithdraw, rw.keys, []string{token, rw.channel})
		return err
	}
	return rw, nil
}

func (rw *rwlock) RLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindReadLock, false)
}

func (rw *rwlock) TryRLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindReadLock, true)
}

func (rw *rwlock) Lock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindWriteLock, false)
}

func (rw *rwlock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindWriteLock, true)
}

func (rw *rwlock) acquire(ctx context.Context, kind latchkit.Kind, try bool) (latchkit.Lease, error) {
	a := acquisition{op: "lock", kind: kind, name: rw.name, chans: rw.chans, try: try,
		attempt: rw.readFn, giveBack: rw.readBackFn}
	if kind == latchkit.KindWriteLock {
		a.attempt, a.giveBack, a.queues = rw.writeFn, rw.writeBackFn, true
		if try {
			a.attempt = rw.tryWriteFn // a TryLock does not queue
		}
	}
	return rw.cfg.acquire(ctx, rw.b, a)
}

type rwReader struct{ *rwlock }

func (r rwReader) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, r, token, ttl)
}

func (r rwReader) release(ctx context.Context, token string) (bool, error) {
	return flag(r.b.Eval(ctx, rwReadRelease, r.keys, []string{token, r.channel}))
}

func (r rwReader) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(r.b.Eval(ctx, rwReadTTL, r.keys[:1], []string{token}))
}

type rwWriter struct{ *rwlock }

func (w rwWriter) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, w, token, ttl)
}

func (w rwWriter) release(ctx context.Context, token string) (bool, error) {
	return flag(w.b.Eval(ctx, rwWriteRelease, w.keys, []string{token, w.channel}))
}

func (w rwWriter) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(w.b.Eval(ctx, rwWriteTTL, w.keys, []string{token}))
}
