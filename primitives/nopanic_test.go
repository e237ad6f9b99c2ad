package primitives_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// primSet is one of each primitive on a Client, under prefix.
type primSet struct {
	mu, rm, fm, ml, rl primitives.Mutex
	rw                 primitives.RWLock
	sem, fs            primitives.Semaphore
	el                 primitives.Election
	la                 primitives.Latch
}

func newPrimSet(t *testing.T, cl *primitives.Client, prefix string) *primSet {
	t.Helper()
	o := primitives.WithPrefix(prefix)
	return &primSet{
		mu:  must[primitives.Mutex](t)(primitives.NewMutex(cl, "m", o)),
		rm:  must[primitives.Mutex](t)(primitives.NewReentrantMutex(cl, "r", o)),
		fm:  must[primitives.Mutex](t)(primitives.NewFairMutex(cl, "f", o)),
		ml:  must[primitives.Mutex](t)(primitives.NewMultiLock(cl, []string{"a", "b"}, o)),
		rl:  must[primitives.Mutex](t)(primitives.NewRedlock([]*primitives.Client{cl}, "rl", o)),
		rw:  must[primitives.RWLock](t)(primitives.NewRWLock(cl, "rw", o)),
		sem: must[primitives.Semaphore](t)(primitives.NewSemaphore(cl, "s", 2, o)),
		fs:  must[primitives.Semaphore](t)(primitives.NewFairSemaphore(cl, "fs", 2, o)),
		el:  must[primitives.Election](t)(primitives.NewElection(cl, "e", o)),
		la:  must[primitives.Latch](t)(primitives.NewLatch(cl, "l", o)),
	}
}

func (p *primSet) mutexes() map[string]primitives.Mutex {
	return map[string]primitives.Mutex{"Mutex": p.mu, "ReentrantMutex": p.rm, "FairMutex": p.fm, "MultiLock": p.ml, "Redlock": p.rl}
}

func (p *primSet) semaphores() map[string]primitives.Semaphore {
	return map[string]primitives.Semaphore{"Semaphore": p.sem, "FairSemaphore": p.fs}
}

// Issue 38, finding 5: every exported function and method of package
// primitives, called with bad input (nil and zero-value Clients, closed
// Clients, nil contexts, nil functions, empty and overlong names, zero and
// negative durations, counts and limits), returns an error matching
// ErrInvalid (bad input: nothing is written) or ErrClosed (a closed
// Client), or is a documented no-op; nothing panics. A nil context is bad
// input like any other: every call refuses it with ErrInvalid, and
// WithOwner of a nil context is nil, which the call given it refuses.
// apicover.Check requires a case for every exported function and method,
// so a new one is not forgotten.
func TestNoPanicOnBadInput(t *testing.T) {
	m, newClient := closeTestRedis(t)
	live := newClient()
	closed := newClient()
	ok := newPrimSet(t, live, "ok:")      // for a lease to misuse
	bad := newPrimSet(t, live, "bad:")    // called with bad input: never writes
	gone := newPrimSet(t, closed, "bad:") // its Client is closed
	if err := closed.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	bg, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx := primitives.WithOwner(bg, "owner")
	var nilCtx context.Context
	inv, clo := []error{latchkit.ErrInvalid}, []error{latchkit.ErrClosed}

	// lease is a call's lease, its error, in the form every Lock and
	// Acquire returns.
	type call = func(context.Context) (latchkit.Lease, error)
	acquire := func(t *testing.T, what string, good, closed call) {
		t.Helper()
		apicover.Must(t, what+"(nil ctx)", func() error { _, err := good(nilCtx); return err }, inv...)
		apicover.Must(t, what+" on a closed Client", func() error { _, err := closed(ctx); return err }, clo...)
	}
	// ctors checks a constructor with a nil, a zero-value and a closed
	// Client, and with bad names and options: each refused.
	ctors := func(t *testing.T, what string, mk func(cl *primitives.Client, name string, opts ...primitives.Option) error) {
		t.Helper()
		apicover.Must(t, what+"(nil Client)", func() error { return mk(nil, "x") }, inv...)
		apicover.Must(t, what+"(zero Client)", func() error { return mk(&primitives.Client{}, "x") }, inv...)
		apicover.Must(t, what+"(closed Client)", func() error { return mk(closed, "x") }, clo...)
		apicover.Must(t, what+"(empty name)", func() error { return mk(live, "") }, inv...)
		apicover.Must(t, what+"(name past MaxName)", func() error { return mk(live, strings.Repeat("n", primitives.MaxName+1)) }, inv...)
		apicover.Calm(t, what+"(nil option)", func() error { return mk(live, "x", nil) })
	}
	// opt checks that o, given to every lock-family constructor, is
	// refused with ErrInvalid (bad is true) or accepted.
	opt := func(t *testing.T, what string, bad bool, o ...primitives.Option) {
		t.Helper()
		for _, k := range []struct {
			kind string
			mk   func() error
		}{
			{"NewMutex", func() error { _, err := primitives.NewMutex(live, "x", o...); return err }},
			{"NewReentrantMutex", func() error { _, err := primitives.NewReentrantMutex(live, "x", o...); return err }},
			{"NewFairMutex", func() error { _, err := primitives.NewFairMutex(live, "x", o...); return err }},
			{"NewMultiLock", func() error { _, err := primitives.NewMultiLock(live, []string{"x", "y"}, o...); return err }},
			{"NewRWLock", func() error { _, err := primitives.NewRWLock(live, "x", o...); return err }},
			{"NewSemaphore", func() error { _, err := primitives.NewSemaphore(live, "x", 1, o...); return err }},
			{"NewFairSemaphore", func() error { _, err := primitives.NewFairSemaphore(live, "x", 1, o...); return err }},
			{"NewElection", func() error { _, err := primitives.NewElection(live, "x", o...); return err }},
		} {
			if bad {
				apicover.Must(t, k.kind+"("+what+")", k.mk, inv...)
			} else if err := apicover.Calm(t, k.kind+"("+what+")", k.mk); err != nil {
				t.Errorf("%s(%s): %v, want it accepted", k.kind, what, err)
			}
		}
	}
	leaseOf := func(t *testing.T, p primitives.Mutex) latchkit.Lease {
		t.Helper()
		l, err := p.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	cases := map[string]func(t *testing.T){
		"NewClient": func(t *testing.T) {
			apicover.Must(t, "NewClient(nil)", func() error { _, err := primitives.NewClient(nil); return err }, inv...)
		},
		"NewMutex": func(t *testing.T) {
			ctors(t, "NewMutex", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewMutex(cl, n, o...)
				return err
			})
		},
		"NewReentrantMutex": func(t *testing.T) {
			ctors(t, "NewReentrantMutex", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewReentrantMutex(cl, n, o...)
				return err
			})
		},
		"NewFairMutex": func(t *testing.T) {
			ctors(t, "NewFairMutex", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewFairMutex(cl, n, o...)
				return err
			})
		},
		"NewRWLock": func(t *testing.T) {
			ctors(t, "NewRWLock", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewRWLock(cl, n, o...)
				return err
			})
		},
		"NewElection": func(t *testing.T) {
			ctors(t, "NewElection", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewElection(cl, n, o...)
				return err
			})
		},
		"NewSemaphore": func(t *testing.T) {
			ctors(t, "NewSemaphore", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewSemaphore(cl, n, 1, o...)
				return err
			})
			for _, limit := range []int{0, -1, -1 << 63} {
				apicover.Must(t, "NewSemaphore(limit)", func() error { _, err := primitives.NewSemaphore(live, "x", limit); return err }, inv...)
			}
		},
		"NewFairSemaphore": func(t *testing.T) {
			ctors(t, "NewFairSemaphore", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewFairSemaphore(cl, n, 1, o...)
				return err
			})
			for _, limit := range []int{0, -1, -1 << 63} {
				apicover.Must(t, "NewFairSemaphore(limit)", func() error { _, err := primitives.NewFairSemaphore(live, "x", limit); return err }, inv...)
			}
		},
		"NewMultiLock": func(t *testing.T) {
			ctors(t, "NewMultiLock", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewMultiLock(cl, []string{n, "other"}, o...)
				return err
			})
			for _, names := range [][]string{nil, {}, {""}, {"a", "a"}, {"a", ""}} {
				apicover.Must(t, "NewMultiLock(names)", func() error { _, err := primitives.NewMultiLock(live, names); return err }, inv...)
			}
		},
		"NewLatch": func(t *testing.T) {
			ctors(t, "NewLatch", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewLatch(cl, n, clienttest.Fitting[primitives.LatchOption](o)...)
				return err
			})
			apicover.Must(t, "NewLatch(WithPrefix(\"\"))", func() error { _, err := primitives.NewLatch(live, "x", primitives.WithPrefix("")); return err }, inv...)
		},
		"NewRedlock": func(t *testing.T) {
			ctors(t, "NewRedlock", func(cl *primitives.Client, n string, o ...primitives.Option) error {
				_, err := primitives.NewRedlock([]*primitives.Client{cl}, n, clienttest.Fitting[primitives.RedlockOption](o)...)
				return err
			})
			for _, cls := range [][]*primitives.Client{nil, {}, {nil}, {live, nil}, {live, live}, {live, {}}} {
				apicover.Must(t, "NewRedlock(clients)", func() error { _, err := primitives.NewRedlock(cls, "x"); return err }, inv...)
			}
			apicover.Must(t, "NewRedlock(clients)", func() error { _, err := primitives.NewRedlock([]*primitives.Client{live, closed}, "x"); return err }, clo...)
		},
		"WithTTL": func(t *testing.T) {
			for _, d := range []time.Duration{0, -1, primitives.MinTTL - 1, -1 << 63} {
				opt(t, "WithTTL", true, primitives.WithTTL(d))
			}
			opt(t, "WithTTL(1<<63-1)", false, primitives.WithTTL(1<<63-1))
		},
		"WithWaiterTimeout": func(t *testing.T) {
			for _, d := range []time.Duration{0, -1, time.Millisecond} {
				opt(t, "WithWaiterTimeout", true, primitives.WithWaiterTimeout(d))
			}
		},
		"WithRetention": func(t *testing.T) {
			for _, d := range []time.Duration{0, -1, time.Microsecond} {
				opt(t, "WithRetention", true, primitives.WithRetention(d))
			}
		},
		"WithPrefix": func(t *testing.T) {
			for _, p := range []string{"", "a{", "}"} {
				opt(t, "WithPrefix", true, primitives.WithPrefix(p))
			}
		},
		"WithRetry": func(t *testing.T) {
			opt(t, "WithRetry(nil)", true, primitives.WithRetry(nil))
		},
		"WithReplicaAck": func(t *testing.T) {
			opt(t, "WithReplicaAck(-1, 1s)", true, primitives.WithReplicaAck(-1, time.Second))
			opt(t, "WithReplicaAck(1, 0)", true, primitives.WithReplicaAck(1, 0))
			opt(t, "WithReplicaAck(1, -1)", true, primitives.WithReplicaAck(1, -1))
			opt(t, "WithReplicaAck(0, 0)", false, primitives.WithReplicaAck(0, 0)) // off
		},
		"WithInstanceTimeout": func(t *testing.T) {
			for _, d := range []time.Duration{-1, 10 * time.Second, 1<<63 - 1} {
				apicover.Must(t, "WithInstanceTimeout", func() error {
					_, err := primitives.NewRedlock([]*primitives.Client{live}, "x", primitives.WithInstanceTimeout(d))
					return err
				}, inv...)
			}
			if _, err := primitives.NewRedlock([]*primitives.Client{live}, "x", primitives.WithInstanceTimeout(0)); err != nil {
				t.Errorf("WithInstanceTimeout(0), the derived default: %v", err)
			}
		},
		"WithAutoExtend": func(t *testing.T) { opt(t, "WithAutoExtend(false)", false, primitives.WithAutoExtend(false)) },
		"WithHeldWarning": func(t *testing.T) {
			opt(t, "WithHeldWarning(-1)", true, primitives.WithHeldWarning(-1))
			opt(t, "WithHeldWarning(0)", false, primitives.WithHeldWarning(0)) // off
		},
		"WithClientName": func(t *testing.T) {
			for _, n := range []string{strings.Repeat("n", 257), "\xff"} {
				apicover.Must(t, "NewClient(WithClientName(bad))", func() error {
					rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
					defer rdb.Close()
					_, err := primitives.NewClient(goredis.New(rdb), primitives.WithClientName(n))
					return err
				}, inv...)
			}
		},
		"WithWakeUps": func(t *testing.T) {
			// No bad input: either value makes a usable Client.
			for _, on := range []bool{false, true} {
				apicover.Calm(t, "NewClient(WithWakeUps(on))", func() error {
					rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
					defer rdb.Close()
					c, err := primitives.NewClient(goredis.New(rdb), primitives.WithWakeUps(on))
					if err == nil {
						err = c.Close(ctx)
					}
					return err
				})
			}
		},
		"WithLogger": func(t *testing.T) { opt(t, "WithLogger(nil)", false, primitives.WithLogger((*slog.Logger)(nil))) },
		"WithMiddleware": func(t *testing.T) {
			opt(t, "WithMiddleware(nil)", false, primitives.WithMiddleware(nil, nil))
			opt(t, "WithMiddleware()", false, primitives.WithMiddleware())
			// A nil middleware is skipped: a Lock through it is granted.
			m := must[primitives.Mutex](t)(primitives.NewMutex(live, "mw", primitives.WithPrefix("ok:"), primitives.WithMiddleware(nil)))
			if err := apicover.Calm(t, "Lock through WithMiddleware(nil)", func() error {
				l, err := m.Lock(ctx)
				if err == nil {
					err = l.Release(ctx)
				}
				return err
			}); err != nil {
				t.Error(err)
			}
		},
		"WithOwner": func(t *testing.T) {
			var got context.Context
			apicover.Calm(t, "WithOwner(nil ctx)", func() error { got = primitives.WithOwner(nilCtx, "o"); return nil })
			if got != nil {
				t.Errorf("WithOwner(nil ctx) = %v, want nil", got)
			}
			apicover.Must(t, "Lock(WithOwner(nil ctx))", func() error { _, err := bad.rm.Lock(got); return err }, inv...)
			apicover.Must(t, "ReentrantMutex Lock(WithOwner(ctx, \"\"))", func() error {
				_, err := bad.rm.Lock(primitives.WithOwner(context.Background(), ""))
				return err
			}, inv...)
		},
		"Mutex.Lock": func(t *testing.T) {
			g := gone.mutexes()
			for k, p := range bad.mutexes() {
				acquire(t, k+".Lock", p.Lock, g[k].Lock)
			}
			apicover.Must(t, "ReentrantMutex.Lock without owner", func() error { _, err := bad.rm.Lock(context.Background()); return err }, inv...)
		},
		"Mutex.TryLock": func(t *testing.T) {
			g := gone.mutexes()
			for k, p := range bad.mutexes() {
				acquire(t, k+".TryLock", p.TryLock, g[k].TryLock)
			}
			apicover.Must(t, "ReentrantMutex.TryLock without owner", func() error { _, err := bad.rm.TryLock(context.Background()); return err }, inv...)
		},
		"RWLock.Lock":     func(t *testing.T) { acquire(t, "RWLock.Lock", bad.rw.Lock, gone.rw.Lock) },
		"RWLock.TryLock":  func(t *testing.T) { acquire(t, "RWLock.TryLock", bad.rw.TryLock, gone.rw.TryLock) },
		"RWLock.RLock":    func(t *testing.T) { acquire(t, "RWLock.RLock", bad.rw.RLock, gone.rw.RLock) },
		"RWLock.TryRLock": func(t *testing.T) { acquire(t, "RWLock.TryRLock", bad.rw.TryRLock, gone.rw.TryRLock) },
		"Semaphore.Acquire": func(t *testing.T) {
			g := gone.semaphores()
			for k, s := range bad.semaphores() {
				acquire(t, k+".Acquire", s.Acquire, g[k].Acquire)
			}
		},
		"Semaphore.TryAcquire": func(t *testing.T) {
			g := gone.semaphores()
			for k, s := range bad.semaphores() {
				acquire(t, k+".TryAcquire", s.TryAcquire, g[k].TryAcquire)
			}
		},
		"Semaphore.AcquireN": func(t *testing.T) {
			g := gone.semaphores()
			for k, s := range bad.semaphores() {
				for _, n := range []int{0, -1, 3, -1 << 63} {
					apicover.Must(t, k+".AcquireN(n)", func() error { _, err := s.AcquireN(ctx, n); return err }, inv...)
				}
				acquire(t, k+".AcquireN", func(c context.Context) (latchkit.Lease, error) { return s.AcquireN(c, 1) },
					func(c context.Context) (latchkit.Lease, error) { return g[k].AcquireN(c, 1) })
			}
		},
		"Semaphore.TryAcquireN": func(t *testing.T) {
			g := gone.semaphores()
			for k, s := range bad.semaphores() {
				for _, n := range []int{0, -1, 3, -1 << 63} {
					apicover.Must(t, k+".TryAcquireN(n)", func() error { _, err := s.TryAcquireN(ctx, n); return err }, inv...)
				}
				acquire(t, k+".TryAcquireN", func(c context.Context) (latchkit.Lease, error) { return s.TryAcquireN(c, 1) },
					func(c context.Context) (latchkit.Lease, error) { return g[k].TryAcquireN(c, 1) })
			}
		},
		"Semaphore.SetLimit": func(t *testing.T) {
			g := gone.semaphores()
			for k, s := range bad.semaphores() {
				for _, n := range []int{0, -1, -1 << 63} {
					apicover.Must(t, k+".SetLimit(n)", func() error { return s.SetLimit(ctx, n) }, inv...)
				}
				apicover.Must(t, k+".SetLimit(nil ctx)", func() error { return s.SetLimit(nilCtx, 1) }, inv...)
				apicover.Must(t, k+".SetLimit on a closed Client", func() error { return g[k].SetLimit(ctx, 1) }, clo...)
			}
		},
		"Election.Campaign": func(t *testing.T) {
			for _, v := range []string{"", strings.Repeat("v", 4097)} {
				apicover.Must(t, "Campaign(bad value)", func() error { _, err := bad.el.Campaign(ctx, v); return err }, inv...)
			}
			acquire(t, "Campaign", func(c context.Context) (latchkit.Lease, error) { return bad.el.Campaign(c, "v") },
				func(c context.Context) (latchkit.Lease, error) { return gone.el.Campaign(c, "v") })
		},
		"Election.TryCampaign": func(t *testing.T) {
			for _, v := range []string{"", strings.Repeat("v", 4097)} {
				apicover.Must(t, "TryCampaign(bad value)", func() error { _, err := bad.el.TryCampaign(ctx, v); return err }, inv...)
			}
			acquire(t, "TryCampaign", func(c context.Context) (latchkit.Lease, error) { return bad.el.TryCampaign(c, "v") },
				func(c context.Context) (latchkit.Lease, error) { return gone.el.TryCampaign(c, "v") })
		},
		"Election.Leader": func(t *testing.T) {
			apicover.Must(t, "Leader(nil ctx)", func() error { _, err := bad.el.Leader(nilCtx); return err }, inv...)
			apicover.Must(t, "Leader on a closed Client", func() error { _, err := gone.el.Leader(ctx); return err }, clo...)
		},
		"Election.Observe": func(t *testing.T) {
			// Documented: the channel is closed at once (Leader says why).
			for what, f := range map[string]func() <-chan primitives.LeaderInfo{
				"Observe(nil ctx)":           func() <-chan primitives.LeaderInfo { return bad.el.Observe(nilCtx) },
				"Observe on a closed Client": func() <-chan primitives.LeaderInfo { return gone.el.Observe(ctx) },
			} {
				var ch <-chan primitives.LeaderInfo
				apicover.Calm(t, what, func() error { ch = f(); return nil })
				select {
				case _, open := <-ch:
					if open {
						t.Errorf("%s delivered a leader", what)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("%s: the channel is not closed", what)
				}
			}
		},
		"Election.Run": func(t *testing.T) {
			fn := func(context.Context, latchkit.Lease) error { return nil }
			apicover.Must(t, "Run(nil fn)", func() error { return bad.el.Run(ctx, "v", nil) }, inv...)
			apicover.Must(t, "Run(empty value)", func() error { return bad.el.Run(ctx, "", fn) }, inv...)
			apicover.Must(t, "Run(nil ctx)", func() error { return bad.el.Run(nilCtx, "v", fn) }, inv...)
			apicover.Must(t, "Run on a closed Client", func() error { return gone.el.Run(ctx, "v", fn) }, clo...)
		},
		"Latch.TrySetCount": func(t *testing.T) {
			for _, n := range []int64{0, -1, -1 << 63} {
				apicover.Must(t, "TrySetCount(n)", func() error { _, err := bad.la.TrySetCount(ctx, n); return err }, inv...)
			}
			apicover.Must(t, "TrySetCount(nil ctx)", func() error { _, err := bad.la.TrySetCount(nilCtx, 1); return err }, inv...)
			apicover.Must(t, "TrySetCount on a closed Client", func() error { _, err := gone.la.TrySetCount(ctx, 1); return err }, clo...)
		},
		"Latch.CountDown": func(t *testing.T) {
			apicover.Must(t, "CountDown(nil ctx)", func() error { return bad.la.CountDown(nilCtx) }, inv...)
			apicover.Must(t, "CountDown on a closed Client", func() error { return gone.la.CountDown(ctx) }, clo...)
		},
		"Latch.Count": func(t *testing.T) {
			apicover.Must(t, "Count(nil ctx)", func() error { _, err := bad.la.Count(nilCtx); return err }, inv...)
			apicover.Must(t, "Count on a closed Client", func() error { _, err := gone.la.Count(ctx); return err }, clo...)
		},
		"Latch.Wait": func(t *testing.T) {
			apicover.Must(t, "Wait(nil ctx)", func() error { return bad.la.Wait(nilCtx) }, inv...)
			apicover.Must(t, "Wait on a closed Client", func() error { return gone.la.Wait(ctx) }, clo...)
		},
		"MultiLease.Fences": func(t *testing.T) {
			l := leaseOf(t, ok.ml)
			ml, isMulti := latchkit.Innermost(l).(primitives.MultiLease)
			if !isMulti {
				t.Fatalf("a MultiLock's lease is %T", latchkit.Innermost(l))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Documented: the fences granted, released or not.
			var f map[string]int64
			apicover.Calm(t, "Fences of a released lease", func() error { f = ml.Fences(); return nil })
			if len(f) != 2 {
				t.Errorf("Fences of a released lease: %v, want both names'", f)
			}
		},
	}
	apicover.Check(t, ".", cases)
	if ks := keyspace.WithoutClientRecords(m.Keys()); len(ks) > 0 {
		for _, k := range ks {
			if strings.HasPrefix(k, "bad:") {
				t.Errorf("a refused call wrote %q", k)
			}
		}
	}
}
