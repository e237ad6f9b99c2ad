package primitives

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// MultiLease is the lease of a MultiLock: besides Fence (the highest of its
// names' fences) it reports the fence of each name.
type MultiLease interface {
	latchkit.Lease
	// Fences returns the fence granted for each name. A resource guarded
	// by one of the names compares against that name's fence, exactly as
	// it would for a Mutex of that name.
	Fences() map[string]int64
}

// The all-at-once MultiLock scripts: KEYS are the Mutex keys of every name
// in canonical order, four per name (lock, fence, release marker,
// annotation), so a MultiLock excludes, and is excluded by, a Mutex of any
// of its names.
var (
	// ARGV: 1 token, 2 ttl ms, 3 annotation. Reply {1, fence...} with one
	// fence per name, or {0, hint ms, annotation of the holder that
	// blocks longest}. Nothing is written unless every name is free.
	multiAcquire = backend.NewScript(luaFence + `
local n = #KEYS / 4
local mine, hint, who = 0, 0, false
for i = 0, n - 1 do
  local v = redis.call('GET', KEYS[i*4+1])
  local bad = fence_of(KEYS[i*4+2]); if bad then return bad end
  if v == ARGV[1] then
    mine = mine + 1
  elseif v then
    local d = math.max(redis.call('PTTL', KEYS[i*4+1]), 1)
    if d > hint then hint, who = d, redis.call('GET', KEYS[i*4+4]) end
  end
end
if hint > 0 then return {0, hint, who} end
local out = {1}
for i = 0, n - 1 do
  if mine == n then
    redis.call('PEXPIRE', KEYS[i*4+1], ARGV[2])
    out[#out+1] = tonumber(redis.call('GET', KEYS[i*4+2]) or '0')
  else
    out[#out+1] = redis.call('INCR', KEYS[i*4+2])
    redis.call('SET', KEYS[i*4+1], ARGV[1], 'PX', ARGV[2])
  end
  if ARGV[3] ~= '' then redis.call('SET', KEYS[i*4+4], ARGV[3], 'PX', ARGV[2]) end
end
return out`)

	// ARGV: 1 token, 2 marker ttl ms, then one channel per name. Releases
	// every name still held; reply 1 when all were held (or already
	// released by an earlier try), 0 when any had been lost.
	multiRelease = backend.NewScript(`
local n = #KEYS / 4
local all = 1
for i = 0, n - 1 do
  if redis.call('GET', KEYS[i*4+1]) == ARGV[1] then
    redis.call('SET', KEYS[i*4+3], ARGV[1], 'PX', ARGV[2])
    redis.call('DEL', KEYS[i*4+1], KEYS[i*4+4])
    redis.call('PUBLISH', ARGV[3+i], '1')
  elseif redis.call('GET', KEYS[i*4+3]) ~= ARGV[1] then
    all = 0
  end
end
return all`)

	// ARGV: 1 token, 2 ttl ms. Extends only when every name is held.
	multiExtend = backend.NewScript(`
local n = #KEYS / 4
for i = 0, n - 1 do
  if redis.call('GET', KEYS[i*4+1]) ~= ARGV[1] then return 0 end
end
for i = 0, n - 1 do
  redis.call('PEXPIRE', KEYS[i*4+1], ARGV[2])
  redis.call('PEXPIRE', KEYS[i*4+4], ARGV[2])
end
return 1`)

	// ARGV: 1 token. The smallest PTTL, or -3 when any name is not held.
	multiTTL = backend.NewScript(`
local n = #KEYS / 4
local least = -1
for i = 0, n - 1 do
  if redis.call('GET', KEYS[i*4+1]) ~= ARGV[1] then return -3 end
  local d = redis.call('PTTL', KEYS[i*4+1])
  if least < 0 or d < least then least = d end
end
return least`)
)

type multiLock struct {
	b        backend.Backend
	names    []string // canonical order
	label    string   // the names joined, for errors and spans
	cfg      config
	keys     []string // all names' keys, four per name
	channels []string // one per name
	parts    []*mutex // one Mutex per name, for the one-slot-at-a-time path
	split    bool     // the names' keys may live on different servers
	ttlArg   string
}

// NewMultiLock returns a Mutex over several names, taken all or nothing
// (Redisson's MultiLock). Each name is locked exactly as a Mutex of that
// name would be (same keys), so a MultiLock and a Mutex over a shared name
// exclude each other. The names are taken in a canonical (sorted) order, so
// two MultiLocks over overlapping names cannot deadlock, and a failed
// attempt leaves none of its names held.
//
// On a single Redis (or a Sentinel-managed one) an attempt is one script
// over all the names. On a Redis Cluster, where the names' keys may live on
// different servers, an attempt locks the names one by one in order and
// rolls back the ones it took when one is held; the lease then extends and
// releases name by name too.
//
// Fence returns the highest of the names' fences, which strictly increases
// from one grant of the same MultiLock to the next; the lease is a
// MultiLease whose Fences gives each name's own fence, the one a resource
// guarded by that name should check.
func NewMultiLock(b backend.Backend, names []string, opts ...Option) (Mutex, error) {
	label := strings.Join(names, ",")
	cfg, err := newConfig(latchkit.KindMultiLock, b, label, opts)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, invalid("new", latchkit.KindMultiLock, label, "no names")
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, n := range sorted {
		if n == "" {
			return nil, invalid("new", latchkit.KindMultiLock, label, "an empty name")
		}
		if i > 0 && sorted[i-1] == n {
			return nil, invalid("new", latchkit.KindMultiLock, label, "name %q given twice", n)
		}
	}
	ml := &multiLock{b: b, names: sorted, label: strings.Join(sorted, ","), cfg: cfg,
		split: backend.IsCluster(b) && len(sorted) > 1, ttlArg: ms(cfg.ttl)}
	for _, n := range sorted {
		m, err := newMutex(latchkit.KindMultiLock, b, n, opts)
		if err != nil {
			return nil, err
		}
		ml.parts = append(ml.parts, m)
		ml.keys = append(ml.keys, m.keys...)
		ml.channels = append(ml.channels, m.channel)
	}
	return ml, nil
}

func (ml *multiLock) Lock(ctx context.Context) (latchkit.Lease, error) {
	return ml.acquire(ctx, false)
}

func (ml *multiLock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return ml.acquire(ctx, true)
}

func (ml *multiLock) acquire(ctx context.Context, try bool) (latchkit.Lease, error) {
	return ml.cfg.acquire(ctx, ml.b, acquisition{op: "lock", kind: latchkit.KindMultiLock, name: ml.label, chans: ml.channels, try: try,
		attempt: func(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error) {
			req.Attempts++
			start := time.Now()
			fences, acks, err := ml.attempt(ctx, req, token)
			if err != nil {
				return nil, err
			}
			byName := make(map[string]int64, len(fences))
			for i, n := range ml.names {
				byName[n] = fences[i]
			}
			return ml.cfg.acked(ctx, &multiLease{
				lease:  newLease(ctx, ml, latchkit.KindMultiLock, ml.label, token, slices.Max(fences), start, &ml.cfg),
				fences: byName,
			}, nil, acks)
		}})
}

// attempt takes every name or none, returning each name's fence and, with
// WithReplicaAck, the fewest replicas any of its scripts reached.
func (ml *multiLock) attempt(ctx context.Context, req *latchkit.Request, token string) ([]int64, int, error) {
	if !ml.split {
		v, acks, err := ml.cfg.evalAcquire(ctx, ml.b, multiAcquire, ml.keys, []string{token, ml.ttlArg, annotation(req)})
		if err != nil {
			return nil, 0, scriptErr(err)
		}
		a, ok := v.([]backend.Value)
		if !ok || len(a) < 2 {
			return nil, 0, badReply(v)
		}
		if a[0] != int64(1) { // {0, hint, holder}
			_, hint, holder, err := pair(v)
			if err != nil {
				return nil, 0, err
			}
			req.WaitHint, req.Holder = time.Duration(hint)*time.Millisecond, holder
			return nil, 0, latchkit.ErrNotAcquired
		}
		nums := make([]int64, len(a))
		for i, x := range a {
			if nums[i], ok = x.(int64); !ok {
				return nil, 0, badReply(v)
			}
		}
		if len(nums) != len(ml.names)+1 {
			return nil, 0, badReply(v)
		}
		req.WaitHint, req.Holder = 0, ""
		return nums[1:], acks, nil
	}
	// One name at a time, in canonical order; on the first that is held,
	// give back the ones taken.
	fences := make([]int64, 0, len(ml.parts))
	least := 0
	for i, m := range ml.parts {
		v, acks, err := ml.cfg.evalAcquire(ctx, m.b, mutexAcquire, m.keys, []string{token, ml.ttlArg, annotation(req)})
		if i == 0 || acks < least {
			least = acks
		}
		if err == nil {
			var ok bool
			var n int64
			var holder string
			if ok, n, holder, err = pair(v); err == nil && !ok {
				req.WaitHint = max(time.Duration(n)*time.Millisecond, 0)
				req.Holder = holder
				err = latchkit.ErrNotAcquired
			} else if err == nil {
				fences = append(fences, n)
				continue
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		for _, taken := range ml.parts[:i+1] { // i too: its outcome may be unknown
			_, _ = taken.release(rctx, token)
		}
		cancel()
		return nil, 0, scriptErr(err)
	}
	req.WaitHint, req.Holder = 0, ""
	return fences, least, nil
}

func (ml *multiLock) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	if !ml.split {
		return extendBy(ctx, ml, token, ttl)
	}
	for _, m := range ml.parts {
		if held, err := m.extend(ctx, token, ttl); err != nil || !held {
			return false, err
		}
	}
	return true, nil
}

func (ml *multiLock) release(ctx context.Context, token string) (bool, error) {
	if !ml.split {
		args := append([]string{token, markerMS}, ml.channels...)
		return flag(ml.b.Eval(ctx, multiRelease, ml.keys, args))
	}
	all := true
	var errs []error
	for _, m := range ml.parts {
		held, err := m.release(ctx, token)
		errs = append(errs, err)
		all = all && held
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return all, nil
}

func (ml *multiLock) ttl(ctx context.Context, token string) (time.Duration, bool, error) {
	if !ml.split {
		return remaining(ml.b.Eval(ctx, multiTTL, ml.keys, []string{token}))
	}
	var least time.Duration = -1
	for _, m := range ml.parts {
		d, held, err := m.ttl(ctx, token)
		if err != nil || !held {
			return 0, false, err
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least, true, nil
}

type multiLease struct {
	*lease
	fences map[string]int64
}

func (l *multiLease) Fences() map[string]int64 { return maps.Clone(l.fences) }
