// Package primitives holds latchkit's distributed locks and semaphores.
// Every acquire, extend and release is one Lua script (one round trip),
// timed by the server's clock, and checked against the holder's token.
package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Mutex is a lock held by one holder at a time.
type Mutex interface {
	// Lock waits until the lock is granted or ctx is done. The error
	// matches ctx.Err() with errors.Is when ctx ended the wait.
	Lock(ctx context.Context) (latchkit.Lease, error)
	// TryLock makes one attempt; it returns an error matching
	// latchkit.ErrNotAcquired when the lock is held.
	TryLock(ctx context.Context) (latchkit.Lease, error)
}

// The mutex scripts. KEYS: 1 the lock (holder's token, PX ttl), 2 the fence
// counter, 3 the release marker (the last released token, kept briefly so a
// retried release can tell it already happened), 4 the holder's annotation
// (latchkit.Request.Annotation, expiring with the lock).
//
// Reads and type checks come first, writes last: a key of the wrong type
// raises an error before anything is changed.
var (
	// ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none). Reply
	// {1, fence} granted, {0, pttl, holder's annotation} held.
	// Finding its own token means an earlier try of this very attempt got
	// through (its reply was lost): granted, with the TTL refreshed.
	mutexAcquire = backend.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if v then return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[4])} end
local f = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
return {1, f}`)

	// ARGV: 1 token, 2 channel, 3 marker ttl ms. Reply 1 released (now or
	// by an earlier try), 0 not held.
	mutexRelease = backend.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  redis.call('DEL', KEYS[1], KEYS[4])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
if redis.call('GET', KEYS[3]) == ARGV[1] then return 1 end
return 0`)

	// ARGV: 1 token, 2 ttl ms. Reply 1 extended, 0 not held.
	mutexExtend = backend.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return 1
end
return 0`)

	// ARGV: 1 token. Reply the PTTL, or -3 when not held.
	mutexTTL = backend.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
return -3`)
)

// markerTTL is how long a release marker lives: longer than any retry of the
// release that wrote it.
const markerTTL = 60 * time.Second

type mutex struct {
	b       backend.Backend
	name    string
	cfg     config
	keys    []string // lock, fence, marker, annotation
	channel string
	chans   []string // {channel}, shared by every Request (read-only)
	ttlArg  string
}

// NewMutex returns a Mutex named name on b: Redis's SET NX PX lock with an
// owner-checked release, a fencing token per grant, auto-extend and
// wake-on-release waiting. Its keys are prefix{name}, prefix{name}:fence
// (kept forever, so that fences never repeat), prefix{name}:released and
// prefix{name}:who (the holder's annotation, when middleware sets one).
func NewMutex(b backend.Backend, name string, opts ...Option) (Mutex, error) {
	m, err := newMutex(latchkit.KindMutex, b, name, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func newMutex(kind latchkit.Kind, b backend.Backend, name string, opts []Option) (*mutex, error) {
	cfg, err := newConfig(kind, b, name, opts)
	if err != nil {
		return nil, err
	}
	// The keys share their prefixes: the lock key is a prefix of the fence
	// key, the channel of the marker.
	base := KeyBase(cfg.prefix, name)
	fence, marker := base+":fence", base+":released"
	k := &[5]string{fence[:len(base)], fence, marker, base + ":who", marker[:len(base)+len(":rel")]}
	return &mutex{
		b: b, name: name, cfg: cfg,
		keys:    k[:4],
		channel: k[4],
		chans:   k[4:],
		ttlArg:  ms(cfg.ttl),
	}, nil
}

func (m *mutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, false)
}

func (m *mutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, true)
}

func (m *mutex) acquire(ctx context.Context, kind latchkit.Kind, try bool) (latchkit.Lease, error) {
	return m.cfg.acquire(ctx, m.b, acquisition{op: "lock", kind: kind, name: m.name, chans: m.chans, try: try, attempt: m.attempt})
}

// attempt runs the acquire script once.
func (m *mutex) attempt(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error) {
	req.Attempts++
	start := time.Now()
	v, acks, err := m.cfg.evalAcquire(ctx, m.b, mutexAcquire, m.keys, []string{token, m.ttlArg, annotation(req)})
	if err != nil {
		return nil, scriptErr(err)
	}
	l, err := grant(ctx, req, v, m, token, start, &m.cfg)
	return m.cfg.acked(ctx, l, err, acks)
}

func (m *mutex) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return flag(m.b.Eval(ctx, mutexExtend, m.keys, []string{token, ms(ttl)}))
}

func (m *mutex) release(ctx context.Context, token string) (bool, error) {
	return flag(m.b.Eval(ctx, mutexRelease, m.keys, []string{token, m.channel, markerMS}))
}

func (m *mutex) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(m.b.Eval(ctx, mutexTTL, m.keys[:1], []string{token}))
}

var markerMS = ms(markerTTL)

// ms formats d as whole milliseconds, at least 1.
func ms(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// pair decodes a {flag, n} script reply, or {0, n, holder} where holder is
// the annotation the holder stored (nil or a string).
func pair(v backend.Value) (bool, int64, string, error) {
	a, ok := v.([]backend.Value)
	if !ok || len(a) < 2 || len(a) > 3 {
		return false, 0, "", badReply(v)
	}
	flag, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return false, 0, "", badReply(v)
	}
	var holder string
	if len(a) == 3 && a[2] != nil {
		if holder, ok = a[2].(string); !ok {
			return false, 0, "", badReply(v)
		}
	}
	return flag == 1, n, holder, nil
}

// annotation is what an attempt stores beside its grant: the request's
// Annotation, or nothing when it is too long to store.
func annotation(req *latchkit.Request) string {
	if len(req.Annotation) > latchkit.MaxAnnotation {
		return ""
	}
	return req.Annotation
}

// errBadReply marks a script reply of an unexpected shape: a backend that
// does not normalize replies as backend.Value documents.
var errBadReply = errors.New("unexpected script reply")

func badReply(v backend.Value) error { return fmt.Errorf("%w: %#v", errBadReply, v) }

// scriptErr makes a key of the wrong type the caller's fault: ErrInvalid.
func scriptErr(err error) error {
	if errors.Is(err, backend.ErrWrongType) {
		return fmt.Errorf("%w: a key of the primitive holds another kind of value: %w", latchkit.ErrInvalid, err)
	}
	return err
}

// opErr wraps err with the operation and primitive, unless it already is.
func opErr(op string, kind latchkit.Kind, name string, err error) error {
	var oe *latchkit.OpError
	if errors.As(err, &oe) {
		return err
	}
	return &latchkit.OpError{Op: op, Kind: kind, Name: name, Err: err}
}
