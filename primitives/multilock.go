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
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/pubsub"
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

// The MultiLock scripts of names on one server (lua/multi_*.lua), over
// the Mutex keys of every name, seven per name: a MultiLock excludes, and is
// excluded by, a Mutex of any of its names, and waits in the same queues.
var (
	multiAcquire  = loadScript("multi_acquire")
	multiRelease  = loadScript("multi_release")
	multiWithdraw = loadScript("multi_withdraw")
	multiExtend   = loadScript("multi_extend")
	multiTTL      = loadScript("multi_ttl")
)

type multiLock struct {
	b        backend.Backend
	names    []string // canonical order
	label    string   // the names joined, for errors and spans
	cfg      kit.Config
	keys     []string // all names' Mutex keys, seven per name
	channels []string // one per name
	parts    []*mutex // one Mutex per name, for the one-slot-at-a-time path
	split    bool     // the names' keys may live on different servers
	ttlArg   string
	waitArg  string
	handArg  string
	inbox    string   // where a hand-over to a waiter of this process is told
	chans    []string // a waiting Lock's: every name's release channel, and the inbox

	attemptFn, tryFn   func(context.Context, *kit.Attempt) (latchkit.Lease, error)
	withdrawFn, backFn func(context.Context, string) error
}

// NewMultiLock returns a Mutex over several names, taken all or none
// (Redisson's MultiLock). Each name is locked as its Mutex would be, so the
// two exclude each other; waiting Locks take the names in sorted order and
// cannot deadlock, and a Lock that gives up holds none. Its lease is a
// MultiLease: Fence is the highest of the names' fences, Fences each
// name's own, the one a resource guarded by that name should check.
func NewMultiLock(cl *Client, names []string, opts ...Option) (Mutex, error) {
	if len(names) == 0 {
		return nil, kit.Invalid("new", latchkit.KindMultiLock, "", "the list of names is empty")
	}
	b := kit.BackendOf(core(cl))
	label := strings.Join(names, ",")
	cfg, err := newConfigNames(latchkit.KindMultiLock, core(cl), label, names, opts)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, n := range sorted {
		if i > 0 && sorted[i-1] == n {
			return nil, kit.Invalid("new", latchkit.KindMultiLock, label, "name %q given twice", n)
		}
	}
	ml := &multiLock{b: b, names: sorted, label: strings.Join(sorted, ","), cfg: cfg,
		split: backend.IsCluster(b) && len(sorted) > 1, ttlArg: kit.Ms(cfg.TTL),
		waitArg: kit.Ms(cfg.WaiterTimeout), handArg: kit.Ms(min(cfg.TTL, cfg.WaiterTimeout))}
	for _, n := range sorted {
		m, err := newMutex(latchkit.KindMultiLock, core(cl), n, opts)
		if err != nil {
			return nil, err
		}
		ml.parts = append(ml.parts, m)
		ml.keys = append(ml.keys, m.qkeys...)
		ml.channels = append(ml.channels, m.channel)
	}
	ml.inbox = pubsub.Inbox(b, ml.channels[0])
	ml.chans = append(slices.Clone(ml.channels), ml.inbox)
	ml.attemptFn = func(ctx context.Context, at *kit.Attempt) (latchkit.Lease, error) { return ml.attempt(ctx, at) }
	ml.tryFn = ml.attemptFn
	ml.withdrawFn = func(ctx context.Context, token string) error { return ml.giveBack(ctx, token, ml.entry(token)) }
	ml.backFn = func(ctx context.Context, token string) error { return ml.giveBack(ctx, token, "") }
	return ml, nil
}

func (ml *multiLock) Lock(ctx context.Context) (latchkit.Lease, error) {
	return ml.cfg.Acquire(ctx, ml.b, kit.Acquisition{Op: "lock", Method: "Lock", Kind: latchkit.KindMultiLock, Name: ml.label,
		Chans: ml.chans, Attempt: ml.attemptFn, GiveBack: ml.withdrawFn, Queues: true, WakeID: true})
}

func (ml *multiLock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return ml.cfg.Acquire(ctx, ml.b, kit.Acquisition{Op: "lock", Method: "Lock", Kind: latchkit.KindMultiLock, Name: ml.label,
		Try: true, Attempt: ml.tryFn, GiveBack: ml.backFn})
}

// entry is token's queue entry: the token and the inbox of this process.
func (ml *multiLock) entry(token string) string { return token + " " + ml.inbox }

// attempt takes every name, or, waiting, as many as ordered holding allows
// (see NewMultiLock).
func (ml *multiLock) attempt(ctx context.Context, at *kit.Attempt) (latchkit.Lease, error) {
	start := time.Now()
	fences, acks, err := ml.take(ctx, at)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]int64, len(fences))
	for i, n := range ml.names {
		byName[n] = fences[i]
	}
	// acked is given the *lease itself, not the multiLease around it: a
	// grant it refuses is passed on through ml.pass (see passOn), which
	// does not remember the token, as Release would.
	l := kit.NewLease(ctx, ml, latchkit.KindMultiLock, ml.label, at.Token, slices.Max(fences), start, &ml.cfg)
	if _, err := ml.cfg.Acked(ctx, l, nil, acks); err != nil {
		return nil, err
	}
	return &multiLease{Lease: l, fences: byName}, nil
}

// take runs one attempt, returning each name's fence and, with
// WithReplicaAck, the fewest replicas any of its scripts reached.
func (ml *multiLock) take(ctx context.Context, at *kit.Attempt) ([]int64, int, error) {
	if ml.split {
		return ml.takeEach(ctx, at)
	}
	args := make([]string, 0, 6+len(ml.channels))
	args = append(args, at.Token, ml.ttlArg, at.Annotation, "", "", ml.handArg)
	if !at.Try {
		args[3], args[4] = ml.waitArg, ml.entry(at.Token)
	}
	args = append(append(args, ml.channels...), ml.cfg.RetArg)
	v, acks, err := ml.cfg.EvalAcquire(ctx, ml.b, multiAcquire, ml.keys, args)
	if err != nil {
		return nil, 0, kit.KeyErr(ctx, ml.b, ml.keys, err)
	}
	a, ok := v.([]backend.Value)
	if !ok || len(a) < 2 {
		return nil, 0, kit.BadReply(v)
	}
	if a[0] != int64(1) { // {0, hint, holder}
		_, hint, holder, err := kit.Pair(v)
		if err != nil {
			return nil, 0, err
		}
		return nil, 0, kit.HeldErr(hint, holder)
	}
	if len(a) != len(ml.names)+1 {
		return nil, 0, kit.BadReply(v)
	}
	fences := make([]int64, len(ml.names))
	for i, x := range a[1:] {
		if fences[i], ok = x.(int64); !ok {
			return nil, 0, kit.BadReply(v)
		}
	}
	return fences, acks, nil
}

// takeEach is an attempt on a Cluster: one name at a time, in canonical
// order, each with the Mutex's own script. A TryLock that finds a name held
// gives back the names it took. A waiting Lock keeps the names before the
// first held one (their locks refreshed by each attempt), queues on that
// one, and gives back whatever it may hold or have queued beyond it.
func (ml *multiLock) takeEach(ctx context.Context, at *kit.Attempt) ([]int64, int, error) {
	fences := make([]int64, 0, len(ml.parts))
	least := 0
	for i, m := range ml.parts {
		args := []string{at.Token, ml.ttlArg, at.Annotation}
		if !at.Try {
			args = append(args, ml.waitArg, ml.entry(at.Token), kit.QueuedArg(at))
		}
		v, acks, err := ml.cfg.EvalAcquire(ctx, m.b, mutexAcquire, m.qkeys, args)
		at.Reach = max(at.Reach, i+1)
		if i == 0 || acks < least {
			least = acks
		}
		if err == nil {
			var ok bool
			var n int64
			var holder string
			if ok, n, holder, err = kit.Pair(v); err == nil && ok {
				fences = append(fences, n)
				continue
			} else if err == nil {
				err = kit.HeldErr(n, holder)
			}
		}
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kit.GiveBackTimeout)
		defer cancel()
		if at.Try {
			// All or nothing: give back the names taken, and this one,
			// whose outcome may be unknown.
			for _, taken := range ml.parts[:i+1] {
				_ = taken.withdrawEntry(gctx, at.Token, "", true)
			}
		} else if _, held := err.(*latchkit.HeldError); held {
			// Hold nothing and queue nowhere beyond the name waited for
			// (where an earlier attempt may have got).
			for _, beyond := range ml.parts[i+1 : at.Reach] {
				_ = beyond.withdrawEntry(gctx, at.Token, ml.entry(at.Token), false)
			}
			at.Reach = i + 1
		}
		return nil, 0, kit.ScriptErr(err)
	}
	return fences, least, nil
}

// giveBack gives back what an acquisition that ended without a grant may
// hold (reserved, granted by an attempt whose reply was lost, handed over)
// or have queued (entry; "" for none).
func (ml *multiLock) giveBack(ctx context.Context, token, entry string) error {
	if !ml.split {
		args := append(append([]string{token, ml.handArg, entry}, ml.channels...), ml.cfg.RetArg)
		_, err := ml.b.Eval(ctx, multiWithdraw, ml.keys, args)
		return err
	}
	var errs []error
	for _, m := range ml.parts {
		errs = append(errs, m.withdrawEntry(ctx, token, entry, true))
	}
	return errors.Join(errs...)
}

// Pass frees every name token was just granted, without ending the
// acquisition (see kit.Passer): on one server multi_withdraw with its pass
// flag, on a Cluster each name's Mutex pass; neither remembers the token.
func (ml *multiLock) Pass(ctx context.Context, token string) (bool, error) {
	if !ml.split {
		args := append(append([]string{token, ml.handArg, ""}, ml.channels...), ml.cfg.RetArg, "0")
		_, err := ml.b.Eval(ctx, multiWithdraw, ml.keys, args)
		return true, err
	}
	var errs []error
	for _, m := range ml.parts {
		_, err := m.Pass(ctx, token)
		errs = append(errs, err)
	}
	return true, errors.Join(errs...)
}

func (ml *multiLock) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	if !ml.split {
		return kit.ExtendBy(ctx, ml, &ml.cfg, token, ttl)
	}
	for _, m := range ml.parts {
		if held, err := m.Extend(ctx, token, ttl); err != nil || !held {
			return false, err
		}
	}
	return true, nil
}

func (ml *multiLock) Release(ctx context.Context, token string) (bool, error) {
	if !ml.split {
		args := append(append([]string{token, ml.handArg}, ml.channels...), ml.cfg.RetArg)
		return kit.Flag(ml.b.Eval(ctx, multiRelease, ml.keys, args))
	}
	all := true
	var errs []error
	for _, m := range ml.parts {
		held, err := m.Release(ctx, token)
		errs = append(errs, err)
		all = all && held
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return all, nil
}

func (ml *multiLock) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	if !ml.split {
		return kit.Remaining(ml.b.Eval(ctx, multiTTL, ml.locks(), []string{token}))
	}
	var least time.Duration = -1
	for _, m := range ml.parts {
		d, held, err := m.TTL(ctx, token)
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
	*kit.Lease
	fences map[string]int64
}

func (l *multiLease) Fences() map[string]int64 { return maps.Clone(l.fences) }

// locks are the locks of a MultiLock's names, in the order of its keys:
// the KEYS of multi_extend and multi_ttl.
func (ml *multiLock) locks() []string {
	n := len(keyspace.MutexLayout.Keys)
	locks := make([]string, 0, len(ml.keys)/n)
	for i := 0; i < len(ml.keys); i += n {
		locks = append(locks, ml.keys[i])
	}
	return locks
}

// RenewCall is multiLock's one extend call over every name (their locks
// as KEYS, their annotations as companions), unless the names are split
// over cluster nodes (then extend runs name by name).
func (ml *multiLock) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	if ml.split {
		return nil, nil, nil, nil, false
	}
	n := len(keyspace.MutexLayout.Keys)
	notes := make([]string, 0, len(ml.keys)/n)
	for i := 3; i < len(ml.keys); i += n {
		notes = append(notes, ml.keys[i])
	}
	return ml.b, multiExtend, ml.locks(), kit.ExtendArgs(token, ttl, notes...), ml.cfg.AckReplicas == 0
}
