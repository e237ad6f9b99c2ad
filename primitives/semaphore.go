package primitives

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Semaphore is held by at most a fixed number of holders at a time.
type Semaphore interface {
	// Acquire waits until a permit is granted or ctx is done.
	Acquire(ctx context.Context) (latchkit.Lease, error)
	// TryAcquire makes one attempt; it returns an error matching
	// latchkit.ErrNotAcquired when every permit is held.
	TryAcquire(ctx context.Context) (latchkit.Lease, error)
}

// luaNow is the server's clock in milliseconds: every expiry and ordering
// decision of the sorted-set primitives is made on it, never on a client's.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaFence reads the fence counter at KEYS[i] without writing: a counter
// that holds something else raises WRONGTYPE before any write happens.
const luaFence = `
local function fence_of(key)
  local f = redis.call('GET', key)
  if f and not tonumber(f) then
    return redis.error_reply('WRONGTYPE fence counter ' .. key .. ' is not an integer')
  end
  return nil
end
`

// luaKeepAlive makes a key live at least until ms from now, so that the
// keys of an abandoned primitive disappear once its last holder expired.
const luaKeepAlive = `
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
`

// The semaphore scripts. KEYS: 1 holders (zset token -> expiry, server ms),
// 2 fence counter, 3 holder fences (hash token -> fence), 4 recently
// released tokens (zset token -> release time, the last 1024 of the last
// minute, so that a retried release can tell it already happened),
// 5 holders' annotations (hash token -> latchkit.Request.Annotation).
var (
	// ARGV: 1 token, 2 ttl ms, 3 limit, 4 annotation. Reply {1, fence} or
	// {0, ms until the earliest holder expires, that holder's annotation}.
	semAcquire = backend.NewScript(luaNow + luaFence + luaKeepAlive + `
local ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local bad = fence_of(KEYS[2]); if bad then return bad end
local myfence = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('ZCARD', KEYS[4])
local function annotate()
  if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[4]); keep(KEYS[5], ttl) end
end
if mine and tonumber(mine) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); annotate()
  return {1, tonumber(myfence or '0')}
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #dead do redis.call('HDEL', KEYS[3], dead[i]); redis.call('HDEL', KEYS[5], dead[i]) end
end
if redis.call('ZCARD', KEYS[1]) < limit then
  local f = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], f)
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); annotate()
  return {1, f}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now, redis.call('HGET', KEYS[5], first[1])}`)

	// ARGV: 1 token, 2 channel. Reply 1 released (now or by an earlier
	// try of this release), 0 not held.
	semRelease = backend.NewScript(luaNow + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
  if tonumber(exp) > now then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 60000)
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -1024)
    redis.call('ZADD', KEYS[4], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[4], 60000)
    redis.call('PUBLISH', ARGV[2], '1')
    return 1
  end
  return 0
end
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 1 end
return 0`)

	// ARGV: 1 token, 2 ttl ms. Reply 1 extended, 0 not held. KEYS[1] the
	// holders, KEYS[3] and KEYS[5] kept alive with them.
	semExtend = backend.NewScript(luaNow + luaKeepAlive + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  keep(KEYS[1], ttl); keep(KEYS[3], ttl); keep(KEYS[5], ttl)
  return 1
end
return 0`)

	// ARGV: 1 token. Reply the ms left, or -3 when not held.
	semTTL = backend.NewScript(luaNow + `
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > now then return tonumber(exp) - now end
return -3`)
)

type semaphore struct {
	b       backend.Backend
	kind    latchkit.Kind
	name    string
	cfg     config
	keys    []string
	channel string
	chans   []string // {channel}
	args    []string // ttl, limit

	attemptFn  func(context.Context, *attempt) (latchkit.Lease, error)
	giveBackFn func(context.Context, string) error
}

// NewSemaphore returns a counting semaphore of limit permits named name on
// b. Holders live in a sorted set scored by their expiry in the server's
// time; every acquire sweeps the expired ones first, so a crashed holder
// frees its permit after its TTL, and client clocks play no part: no
// over-grant from clock skew. A permit's lease extends, auto-extends and
// releases like a Mutex lease; every grant takes a fence from the
// semaphore's counter.
//
// Every user of one semaphore must give the same limit: each attempt checks
// the count against its own.
func NewSemaphore(b backend.Backend, name string, limit int, opts ...Option) (Semaphore, error) {
	s, err := newSemaphore(latchkit.KindSemaphore, b, name, limit, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newSemaphore(kind latchkit.Kind, b backend.Backend, name string, limit int, opts []Option) (*semaphore, error) {
	cfg, err := newConfig(kind, b, name, opts)
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, invalid("new", kind, name, "limit %d is below 1", limit)
	}
	base := KeyBase(cfg.prefix, name) + ":sem"
	s := &semaphore{
		b: b, kind: kind, name: name, cfg: cfg,
		keys:    []string{base, base + ":fence", base + ":fences", base + ":released", base + ":who"},
		channel: base + ":rel",
		chans:   []string{base + ":rel"},
		args:    []string{ms(cfg.ttl), strconv.Itoa(limit)},
	}
	s.attemptFn = scriptAttempt(b, semAcquire, s.keys, s.args, s, kind, name, &s.cfg)
	s.giveBackFn = func(ctx context.Context, token string) error {
		_, err := s.release(ctx, token) // a permit the token may hold: nothing else is left behind
		return err
	}
	return s, nil
}

func (s *semaphore) Acquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, false)
}

func (s *semaphore) TryAcquire(ctx context.Context) (latchkit.Lease, error) {
	return s.acquire(ctx, true)
}

func (s *semaphore) acquire(ctx context.Context, try bool) (latchkit.Lease, error) {
	return s.cfg.acquire(ctx, s.b, acquisition{op: "acquire", kind: s.kind, name: s.name, chans: s.chans, try: try,
		attempt: s.attemptFn, giveBack: s.giveBackFn})
}

func (s *semaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, s, token, ttl)
}

func (s *semaphore) release(ctx context.Context, token string) (bool, error) {
	return flag(s.b.Eval(ctx, semRelease, s.keys, []string{token, s.channel}))
}

func (s *semaphore) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(s.b.Eval(ctx, semTTL, s.keys[:1], []string{token}))
}

// flag decodes a 1/0 script reply.
func flag(v backend.Value, err error) (bool, error) {
	if err != nil {
		return false, scriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return false, badReply(v)
	}
	return n == 1, nil
}

// remaining decodes a TTL script reply: ms left, or -3 when not held.
func remaining(v backend.Value, err error) (time.Duration, bool, error) {
	if err != nil {
		return 0, false, scriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, false, badReply(v)
	}
	if n == -3 {
		return 0, false, nil
	}
	return max(time.Duration(n)*time.Millisecond, 0), true, nil
}

// invalid is the ErrInvalid error of a bad argument.
func invalid(op string, kind latchkit.Kind, name, format string, a ...any) error {
	return &latchkit.OpError{Op: op, Kind: kind, Name: name,
		Err: fmt.Errorf("%w: "+format, append([]any{latchkit.ErrInvalid}, a...)...)}
}
