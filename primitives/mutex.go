// Package primitives holds latchkit's distributed locks and semaphores.
// Every acquire, extend and release is one Lua script (one round trip),
// timed by the server's clock, and checked against the holder's token.
package primitives

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/pubsub"
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
// (latchkit.Request.Annotation, expiring with the lock), and, for the
// scripts of a Mutex itself, 5 the wait queue (zset entry -> place: one
// more than the last place when it joins, so arrival order holds whatever
// the server's clock does) and 6 the waiters' liveness (zset entry ->
// expiry, server ms).
// MultiLock and Redlock pass the first four only: they never queue, and a
// release of theirs hands nothing over.
//
// A waiting Lock queues its token; a release hands the lock straight to the
// oldest live waiter (the lock key is set to its token, the fence bumped)
// and wakes that waiter alone with a targeted message carrying a digest of
// its token, never the token. The waiter's next attempt finds its own token
// and confirms: the TTL it asked for, and the fence. A waiter that stops
// attempting drops out of the queue after the waiter timeout; a lock handed
// to a waiter that never confirms frees itself after the same timeout.
//
// Reads and type checks come first, writes last: a key of the wrong type
// raises an error before anything is changed.
var (
	// ARGV: 1 token, 2 ttl ms, 3 annotation ("" for none), 4 waiter
	// timeout ms ("" or absent: do not queue), 5 "1" when an earlier
	// attempt of this acquisition may have queued it, 6 its queue entry:
	// the token, a space and the channel its process listens on for the
	// hand-over (pubsub.Inbox). Reply {1, fence}
	// granted, {0, wait hint ms, holder's annotation} held.
	// Finding its own token means an earlier try of this very attempt got
	// through (its reply was lost), or a release handed the lock over:
	// granted, with the TTL refreshed.
	mutexAcquire = backend.NewScript(luaKeepAlive + `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local f = redis.pcall('INCR', KEYS[2])
  if type(f) == 'table' then
    redis.call('DEL', KEYS[1])
    return redis.error_reply('WRONGTYPE fence counter: ' .. tostring(f.err))
  end
  if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
  if ARGV[5] == '1' then
    redis.call('ZREM', KEYS[5], ARGV[6])
    redis.call('ZREM', KEYS[6], ARGV[6])
  end
  return {1, f}
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[2]) end
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
local hint = redis.call('PTTL', KEYS[1])
if ARGV[4] and ARGV[4] ~= '' then
  local wait = tonumber(ARGV[4])
  local queued = redis.call('ZSCORE', KEYS[5], ARGV[6])
  redis.call('ZSCORE', KEYS[6], ARGV[6])
  local t = redis.call('TIME')
  if not queued then
    local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
    redis.call('ZADD', KEYS[5], (tonumber(last[2]) or 0) + 1, ARGV[6])
  end
  redis.call('ZADD', KEYS[6], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + wait, ARGV[6])
  keep(KEYS[5], wait); keep(KEYS[6], wait)
  hint = math.min(hint, math.max(math.floor(wait / 3), 1))
end
return {0, hint, redis.call('GET', KEYS[4])}`)

	// mutexRelease, ARGV: 1 token, 2 channel, 3 marker ttl ms, 4 how long
	// a handed-over lock waits for its new holder to confirm, in ms. Reply
	// 1 released (now or by an earlier try), 0 not held.
	mutexRelease = backend.NewScript(luaHandOver + `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  hand_over()
  return 1
end
if redis.call('GET', KEYS[3]) == ARGV[1] then return 1 end
return 0`)

	// mutexWithdraw takes a waiter that gave up out of the queue, and
	// passes the lock on if a release had handed it over meanwhile.
	// ARGV as mutexRelease, then 5 the waiter's queue entry. Reply 0.
	mutexWithdraw = backend.NewScript(luaHandOver + `
redis.call('ZREM', KEYS[5], ARGV[5])
redis.call('ZREM', KEYS[6], ARGV[5])
if redis.call('GET', KEYS[1]) == ARGV[1] then hand_over() end
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

// luaHandOver defines hand_over(), which frees the lock held by ARGV[1]:
// it gives the lock to the oldest live waiter in the queue, if there is
// one (dropping the dead ones it meets), and wakes that waiter alone, on
// its process's inbox channel (an entry without one: on the release
// channel); otherwise it deletes the lock. Without queue keys (MultiLock, Redlock)
// it deletes the lock and wakes a waiter per process.
const luaHandOver = `
local function hand_over()
  if KEYS[5] and redis.call('EXISTS', KEYS[5]) == 1 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    while true do
      local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
      if not head then break end
      local alive = redis.call('ZSCORE', KEYS[6], head)
      redis.call('ZREM', KEYS[5], head)
      redis.call('ZREM', KEYS[6], head)
      if alive and tonumber(alive) > now then
        local tok, box = string.match(head, '^(%S+) (.+)$')
        redis.call('INCR', KEYS[2])
        redis.call('SET', KEYS[1], tok or head, 'PX', ARGV[4])
        redis.call('DEL', KEYS[4])
        redis.call('PUBLISH', box or ARGV[2], '=' .. string.sub(redis.sha1hex(tok or head), 1, 16))
        return
      end
    end
  end
  redis.call('DEL', KEYS[1], KEYS[4])
  if not KEYS[5] then redis.call('PUBLISH', ARGV[2], '1') end
end
`

// wakeID is the digest of token that a hand-over's message names (as
// luaHandOver computes it): the waiter is found without its token going
// over pub/sub.
func wakeID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// markerTTL is how long a release marker lives: longer than any retry of the
// release that wrote it.
const markerTTL = 60 * time.Second

type mutex struct {
	b       backend.Backend
	name    string
	cfg     config
	keys    []string // lock, fence, marker, annotation: what MultiLock and Redlock use
	qkeys   []string // keys, then the wait queue and the waiters' liveness
	channel string
	chans   []string // {channel}, shared by every Request (read-only)
	ttlArg  string
	waitArg string // the waiter timeout, ms
	handArg string // how long a handed-over lock waits to be confirmed, ms

	// m.attempt and m.withdraw as func values, made once.
	attemptFn  func(context.Context, *latchkit.Request, string) (latchkit.Lease, error)
	withdrawFn func(context.Context, string) error

	// Made by the first waiting Lock (most mutexes never wait).
	waitOnce sync.Once
	wchans   []string // {channel, inbox}: a waiting Lock's
	inbox    string   // where a hand-over to a waiter of this process is told
}

// NewMutex returns a Mutex named name on b: Redis's SET NX PX lock with an
// owner-checked release, a fencing token per grant, auto-extend and
// wake-on-release waiting. A waiting Lock queues, and a release hands the
// lock straight to the oldest live waiter, waking only it: waiters are
// served in arrival order and a releasing holder cannot jump the queue. A
// TryLock never queues. Its keys are prefix{name}, prefix{name}:fence (kept
// forever, so that fences never repeat), prefix{name}:released,
// prefix{name}:who (the holder's annotation, when middleware sets one) and
// prefix{name}:q and :qlive (the queue, expiring with WithWaiterTimeout).
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
	channel := marker[:len(base)+len(":rel")]
	k := &[7]string{fence[:len(base)], fence, marker, base + ":who", base + ":q", base + ":qlive", channel}
	m := &mutex{
		b: b, name: name, cfg: cfg,
		keys:    k[:4:4],
		qkeys:   k[:6:6],
		channel: channel,
		chans:   k[6:7:7],
		ttlArg:  ms(cfg.ttl),
		waitArg: ms(cfg.waiterTimeout),
		handArg: ms(min(cfg.ttl, cfg.waiterTimeout)),
	}
	m.attemptFn, m.withdrawFn = m.attempt, m.withdraw
	return m, nil
}

func (m *mutex) Lock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, false)
}

func (m *mutex) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return m.acquire(ctx, latchkit.KindMutex, true)
}

func (m *mutex) acquire(ctx context.Context, kind latchkit.Kind, try bool) (latchkit.Lease, error) {
	chans := m.chans
	if !try {
		m.waitOnce.Do(func() {
			m.inbox = pubsub.Inbox(m.b, m.channel)
			m.wchans = []string{m.channel, m.inbox}
		})
		chans = m.wchans
	}
	return m.cfg.acquire(ctx, m.b, acquisition{op: "lock", kind: kind, name: m.name, chans: chans, try: try,
		attempt: m.attemptFn, abandon: m.withdrawFn, wakeID: true})
}

// entry is token's queue entry: the token and the inbox of this process.
func (m *mutex) entry(token string) string { return token + " " + m.inbox }

// attempt runs the acquire script once. A waiting Lock queues.
func (m *mutex) attempt(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error) {
	req.Attempts++
	start := time.Now()
	args := []string{token, m.ttlArg, annotation(req)}
	if !req.Try {
		queued := ""
		if req.Attempts > 1 {
			queued = "1"
		}
		args = append(args, m.waitArg, queued, m.entry(token))
	}
	v, acks, err := m.cfg.evalAcquire(ctx, m.b, mutexAcquire, m.qkeys, args)
	if err != nil {
		return nil, scriptErr(err)
	}
	l, err := grant(ctx, req, v, m, token, start, &m.cfg)
	return m.cfg.acked(ctx, l, err, acks)
}

func (m *mutex) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return extendBy(ctx, m, token, ttl)
}

func (m *mutex) release(ctx context.Context, token string) (bool, error) {
	return flag(m.b.Eval(ctx, mutexRelease, m.qkeys, []string{token, m.channel, markerMS, m.handArg}))
}

// withdraw takes a Lock that gave up out of the queue.
func (m *mutex) withdraw(ctx context.Context, token string) error {
	_, err := m.b.Eval(ctx, mutexWithdraw, m.qkeys, []string{token, m.channel, markerMS, m.handArg, m.entry(token)})
	return err
}

func (m *mutex) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	return remaining(m.b.Eval(ctx, mutexTTL, m.keys[:1], []string{token}))
}

var markerMS = ms(markerTTL)

// ms formats d as whole milliseconds, at least 1.
func ms(d time.Duration) string {
	n := max(d.Milliseconds(), 1)
	if n%1000 == 0 && n/1000 < int64(len(wholeSeconds)) {
		return wholeSeconds[n/1000] // the usual TTLs and timeouts, without an allocation
	}
	return strconv.FormatInt(n, 10)
}

// wholeSeconds[i] is i seconds in milliseconds, formatted. Never modified.
var wholeSeconds = func() (s [121]string) {
	for i := range s {
		s[i] = strconv.Itoa(i * 1000)
	}
	return s
}()

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
