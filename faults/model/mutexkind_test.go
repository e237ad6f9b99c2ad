package model_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// mutexKind is a primitive with a Mutex's promise (one holder at a time,
// by the server's clock) under test: how to make the rig and each
// client's primitive, and how to read who holds it out of Redis.
type mutexKind struct {
	name string
	rig  func(t *testing.T) *rig
	warm func(t *testing.T, r *rig)
	// ttls: the TTLs drawn (nil: leaseSession's, MinTTL included).
	ttls []time.Duration
	// new makes client c's primitive, over t's primitives.Client(s) of
	// that client's connection(s): each client is a process of its own.
	new func(t clienttest.T, r *rig, c int, opts []primitives.Option) (primitives.Mutex, error)
	// names: the names client c's primitive takes (its fences are per
	// name).
	names func(c int) []string
	// held reads the tokens holding in Redis, each with the remaining TTL
	// of every key it holds (a Mutex's lock key, a MultiLock's lock key
	// per name, a Redlock's lock key per instance).
	held func(r *rig, prefix string) map[string][]time.Duration
	// width: how many keys client c's grant holds.
	width func(r *rig, c int) int
	// quorum: how many of them it must hold (0: all): a Redlock's holder
	// holds on a quorum of instances; the others may have lost their
	// data.
	quorum int
	// more: the kind's own actions (a Redlock's faults of one instance).
	more func(r *rig, ls *leases, mus []primitives.Mutex, granted func(*rapid.T, int, latchkit.Lease, string)) map[string]func(*rapid.T)
	// exactHint: a refused TryLock's wait hint is the holder's remaining
	// TTL.
	exactHint bool
	// stragglers: a call may return before every server has its answer
	// (a Redlock's, decided by a quorum, leaves the last instance's call
	// running): the check waits for every client to settle first.
	stragglers bool
	// waiting reads the places queued in Redis by waiting Locks that are
	// still live (not holding): what a release would hand the lock to.
	waiting func(r *rig, prefix string) []string
}

func one(int) []string { return []string{"m"} }

// lockKeys reads, on every server of r, the Mutex lock keys of names: the
// time each holder's token holds for (a free marker holds nothing).
func lockKeys(r *rig, prefix string, names ...string) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, m := range r.servers() {
		for _, n := range names {
			k := keyspace.MutexLayout.KeysOf(prefix, n)[0]
			if v, err := m.Get(k); err == nil {
				l := keyspace.ParseLock(v)
				if tok := l.HeldAt(r.now.UnixMilli()); tok != "" {
					d := m.TTL(k)
					if l.Until != 0 {
						d = time.Duration(l.Until-r.now.UnixMilli()) * time.Millisecond
					}
					out[tok] = append(out[tok], d)
				}
			}
		}
	}
	return out
}

// mutexWaiting reads, on every server of r, the live entries of the
// Mutex-layout wait queues of names ("token inbox", live while its
// liveness is ahead of the clock): the places a release hands the lock to.
func mutexWaiting(r *rig, prefix string, names ...string) []string {
	var out []string
	for i, m := range r.servers() {
		for _, n := range names {
			keys := keyspace.MutexLayout.KeysOf(prefix, n)
			es, _ := m.ZMembers(keys[5])
			for _, e := range es {
				if sc, err := m.ZScore(keys[6], e); err == nil && int64(sc) > r.now.UnixMilli() {
					out = append(out, fmt.Sprintf("%d:%s:%q", i, n, e))
				}
			}
		}
	}
	return out
}

// fairWaiting reads the live tickets of the FairMutex m that do not hold:
// the tickets a release hands the lock to.
func fairWaiting(r *rig, prefix string) []string {
	return fairWaitingIn(r, keyspace.FairLayout.KeysOf(prefix, "m"))
}

// fairWaitingIn reads the live tickets that do not hold in the
// FairSemaphore-layout keys.
func fairWaitingIn(r *rig, keys []string) []string {
	ts, _ := r.m.ZMembers(keys[0])
	var out []string
	for _, t := range ts {
		if r.m.HGet(keys[2], t) != "" {
			continue // a holder's ticket
		}
		if sc, err := r.m.ZScore(keys[1], t); err == nil && int64(sc) > r.now.UnixMilli() {
			out = append(out, t)
		}
	}
	return out
}

// lockValue is how a Mutex-layout lock held by l reads: its token and its
// fence (see heldLock).
func lockValue(l latchkit.Lease) string {
	return l.Token() + " " + strconv.FormatInt(l.Fence(), 10)
}

// heldLock reads the Mutex-layout lock key on r's first server at the
// model's time: "" when free (absent, a free marker, or a hold past its
// logical end), else "token fence" (its flags left out: they say what the
// scripts need, not who holds), and the time the hold has left.
func heldLock(r *rig, key string) (string, time.Duration) {
	v, err := r.m.Get(key)
	if err != nil {
		return "", 0
	}
	l := keyspace.ParseLock(v)
	tok := l.HeldAt(r.now.UnixMilli())
	if tok == "" {
		return "", 0
	}
	left := r.m.TTL(key)
	if l.Until != 0 {
		left = time.Duration(l.Until-r.now.UnixMilli()) * time.Millisecond
	}
	return tok + " " + strconv.FormatInt(l.Fence, 10), left
}

// multiNames are the names of each client's primitive in the MultiLock
// model: three MultiLocks over overlapping sets and a plain Mutex of the
// name they all share, so that any two exclude each other.
var multiNames = [][]string{{"a", "b"}, {"b", "c"}, {"a", "b", "c"}, {"b"}}

var mutexKinds = []mutexKind{
	{name: "Mutex", rig: newRig, warm: func(t *testing.T, r *rig) { r.warm(t, warmMutex) }, names: one,
		new: func(t clienttest.T, r *rig, c int, o []primitives.Option) (primitives.Mutex, error) {
			return primitives.NewMutex(clienttest.For(t, r.clients[c].b), "m", o...)
		},
		held:    func(r *rig, p string) map[string][]time.Duration { return lockKeys(r, p, "m") },
		waiting: func(r *rig, p string) []string { return mutexWaiting(r, p, "m") },
		width:   func(*rig, int) int { return 1 }, exactHint: true},
	{name: "FairMutex", rig: newRig, warm: func(t *testing.T, r *rig) { r.warm(t, warmFairMutex) }, names: one,
		new: func(t clienttest.T, r *rig, c int, o []primitives.Option) (primitives.Mutex, error) {
			return primitives.NewFairMutex(clienttest.For(t, r.clients[c].b), "m", o...)
		},
		held: func(r *rig, p string) map[string][]time.Duration {
			keys := keyspace.FairLayout.KeysOf(p, "m")
			out := map[string][]time.Duration{}
			hs, _ := r.m.HKeys(keys[2])
			for _, h := range hs {
				if sc, err := r.m.ZScore(keys[1], h); err == nil && int64(sc) > r.now.UnixMilli() {
					out[h] = append(out[h], time.Duration(int64(sc)-r.now.UnixMilli())*time.Millisecond)
				}
			}
			return out
		},
		waiting: fairWaiting,
		width:   func(*rig, int) int { return 1 }},
	{name: "MultiLock", rig: newRig, warm: func(t *testing.T, r *rig) { r.warm(t, warmMulti) },
		names: func(c int) []string { return multiNames[c%len(multiNames)] },
		new: func(t clienttest.T, r *rig, c int, o []primitives.Option) (primitives.Mutex, error) {
			if n := multiNames[c%len(multiNames)]; len(n) > 1 {
				return primitives.NewMultiLock(clienttest.For(t, r.clients[c].b), n, o...)
			}
			return primitives.NewMutex(clienttest.For(t, r.clients[c].b), "b", o...)
		},
		held:    func(r *rig, p string) map[string][]time.Duration { return lockKeys(r, p, "a", "b", "c") },
		waiting: func(r *rig, p string) []string { return mutexWaiting(r, p, "a", "b", "c") },
		width:   func(_ *rig, c int) int { return len(multiNames[c%len(multiNames)]) }, exactHint: true},
	{name: "Redlock", rig: func(t *testing.T) *rig { return newRigOf(t, 3) }, ttls: []time.Duration{time.Second, 10 * time.Second},
		warm: func(t *testing.T, r *rig) {
			for i := range r.servers() {
				r.warmOn(t, i, warmMutex)
			}
		},
		names: one,
		new: func(t clienttest.T, r *rig, c int, o []primitives.Option) (primitives.Mutex, error) {
			return primitives.NewRedlock(clienttest.All(t, r.clients[c].backends()), "m", clienttest.Fitting[primitives.RedlockOption](o)...)
		},
		held:    func(r *rig, p string) map[string][]time.Duration { return lockKeys(r, p, "m") },
		waiting: func(r *rig, p string) []string { return mutexWaiting(r, p, "m") },
		width:   func(r *rig, _ int) int { return len(r.servers()) }, quorum: 2, exactHint: true, stragglers: true,
		more: redlockFaults},
}

// warmFairMutex runs every FairMutex script once (see rig.warm).
func warmFairMutex(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	mu, err := primitives.NewFairMutex(cl, "w", o...)
	if err != nil {
		return err
	}
	return warmLock(ctx, mu)
}

// warmMulti runs every MultiLock and Mutex script once (see rig.warm).
func warmMulti(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	mu, err := primitives.NewMultiLock(cl, []string{"w1", "w2"}, o...)
	if err != nil {
		return err
	}
	if err := warmLock(ctx, mu); err != nil {
		return err
	}
	return warmMutex(ctx, cl, o)
}

// warmLock runs each call of mu once.
func warmLock(ctx context.Context, mu primitives.Mutex) error {
	l, err := mu.TryLock(ctx)
	if err != nil {
		return err
	}
	_, _ = mu.TryLock(ctx)
	wctx, cancel := context.WithTimeout(ctx, shortWait)
	_, _ = mu.Lock(wctx)
	cancel()
	_ = l.Extend(ctx, time.Second)
	_, _ = l.TTL(ctx)
	return l.Release(ctx)
}

// fencesOf is the fence l carries for each name: a MultiLease's own, else
// its one fence for its one name.
func fencesOf(l latchkit.Lease, names []string) map[string]int64 {
	if ml, ok := l.(primitives.MultiLease); ok {
		return ml.Fences()
	}
	return map[string]int64{names[0]: l.Fence()}
}

// TestModelMutex: each primitive with a Mutex's promise (Mutex, FairMutex,
// MultiLock mixed with a Mutex of a name every MultiLock shares, Redlock
// over three servers) against the model: one holder at a time by the
// server's clock, the holder in Redis exactly the model's on every key it
// takes, each name's fences strictly increasing.
func TestModelMutex(t *testing.T) {
	for _, k := range mutexKinds {
		t.Run(k.name, func(t *testing.T) {
			lane.ParallelFast(t) // each kind on servers of its own; mostly waiting on them
			testMutex(t, k)
		})
	}
}

func testMutex(t *testing.T, k mutexKind) {
	r := k.rig(t)
	k.warm(t, r)
	rapid.Check(t, func(t *rapid.T) {
		prefix, ttl, ls, pn, opts := r.leaseSession(t)
		if k.ttls != nil {
			ttl = rapid.SampledFrom(k.ttls).Draw(t, "kind's ttl")
			opts = append(opts, primitives.WithTTL(ttl))
		}
		var mus []primitives.Mutex
		for c := range r.clients {
			mu, err := k.new(t, r, c, opts)
			if err != nil {
				t.Fatal(err)
			}
			mus = append(mus, mu)
		}
		fences := map[string]int64{}
		client, holder := ls.client, ls.holder
		granted := func(t *rapid.T, c int, l latchkit.Lease, what string) {
			for n, f := range fencesOf(l, k.names(c)) {
				if f <= fences[n] {
					fail(t, what+": fence not above the last", n, f, fences[n])
				}
				fences[n] = f
			}
			ls.add(l, c, 1, ttl)
		}
		// noStranger: the keys are held by the model's holder, each for
		// the TTL the model says, or by nobody.
		noStranger := func() string { return k.stranger(r, prefix, holder()) }
		actions := ls.actions(ttl)
		actions["TryLock"] = func(t *rapid.T) {
			c := client(t)
			h := holder()
			ls.touch()
			ctx, cancel := ctxFor(callTimeout)
			l, err := mus[c].TryLock(ctx)
			cancel()
			if instancesLate(err) {
				eventually(t, "after a TryLock whose instances answered late", noStranger)
				return
			}
			if h != nil {
				want(t, "TryLock of a held lock", err, "ErrNotAcquired")
				var he *latchkit.HeldError
				if !errors.As(err, &he) || k.exactHint && he.WaitHint != h.exp.Sub(r.now) {
					fail(t, "TryLock: wait hint differs from the holder's TTL", err, h.exp.Sub(r.now))
				}
				return
			}
			if lateGrant(err, ttl) {
				eventually(t, "after a grant that came back late", noStranger)
				return
			}
			want(t, "TryLock of a free lock", err, "nil")
			granted(t, c, l, "TryLock")
		}
		actions["Lock"] = func(t *rapid.T) {
			c := client(t)
			h := holder()
			ls.touch()
			d := callTimeout
			if h != nil {
				d = shortWait
			}
			ctx, cancel := ctxFor(d)
			l, err := mus[c].Lock(ctx)
			cancel()
			if h != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					fail(t, "Lock of a held lock did not give up at its deadline", err)
				}
				// What it reserved or queued is given back within the
				// give-back's budget, or in the background past it (a
				// busy machine).
				eventually(t, "after a Lock gave up", func() string { return k.gaveUp(r, prefix, h) })
				return
			}
			if lateGrant(err, ttl) {
				eventually(t, "after a Lock whose grants came back late", func() string { return k.gaveUp(r, prefix, nil) })
				return
			}
			want(t, "Lock of a free lock", err, "nil")
			granted(t, c, l, "Lock")
		}
		actions["TryLockLostReply"] = func(t *rapid.T) {
			c := client(t)
			ls.touch()
			var err error
			var l latchkit.Lease
			h := holder()
			r.clients[c].lostReply(func(ctx context.Context) { l, err = mus[c].TryLock(ctx) })
			if err == nil {
				// The driver waited for the resend's reply: the
				// script found its own token, a grant like any other.
				if h != nil {
					t.Fatalf("TryLock of a held lock whose reply was lost was granted")
				}
				granted(t, c, l, "TryLock answered by the resend")
			}
			eventually(t, "after a TryLock whose reply was lost", noStranger)
		}
		actions["TryLockPaused"] = func(t *rapid.T) {
			c := client(t)
			d := rapid.SampledFrom([]time.Duration{0, ttl, ttl + time.Millisecond}).Draw(t, "paused for")
			var err error
			var l latchkit.Lease
			var took time.Duration
			r.clients[c].paused(func(ctx context.Context) {
				start := time.Now()
				l, err = mus[c].TryLock(ctx)
				took = time.Since(start)
			}, func() { r.advance(d) })
			ls.touch()
			if err == nil {
				fail(t, "TryLock of a paused client was granted", took, l.Fence(), r.dump(prefix, ls))
			}
			eventually(t, "after a paused TryLock", noStranger)
		}
		actions["PanicBefore"] = func(t *rapid.T) {
			c := client(t)
			pn.set("before")
			if !recovered(func() { _, _ = mus[c].TryLock(context.Background()) }) {
				t.Fatalf("the middleware did not panic")
			}
		}
		actions["PanicAfterGrant"] = func(t *rapid.T) {
			c := client(t)
			if holder() != nil {
				t.Skip("held: no grant to panic after")
			}
			ls.touch()
			pn.set("after")
			var err error
			if !recovered(func() { _, err = mus[c].TryLock(context.Background()) }) && !lateGrant(err, ttl) && !instancesLate(err) {
				// Not granted: what the free lock's TryLock said.
				fail(t, "the middleware did not panic", err, "\n"+r.dump(prefix, ls))
			}
			eventually(t, "after a middleware panicked on a grant", noStranger)
		}
		if k.more != nil {
			maps.Copy(actions, k.more(r, ls, mus, granted))
		}
		actions[""] = func(t *rapid.T) {
			if k.stragglers {
				r.settle()
			}
			if n := len(ls.live()); n > 1 {
				fail(t, "model: more than one live holder", n)
			}
			if msg := noStranger(); msg != "" {
				fail(t, "the holder in Redis is not the model's", msg, "\n"+r.dump(prefix, ls))
			}
			if msg := k.noWaiter(r, prefix); msg != "" {
				fail(t, "a place is queued in Redis for no waiter", msg, "\n"+r.dump(prefix, ls))
			}
			ls.checkKeys(t)
		}
		t.Repeat(ls.traced(actions))
	})
}

// stranger says how the keys in Redis differ from the model's holder h
// (nil: the lock is free): "" when they are held by h, each for the TTL
// the model says, or by nobody.
func (k mutexKind) stranger(r *rig, prefix string, h *mlease) string {
	got := k.held(r, prefix)
	if h == nil {
		if len(got) > 0 {
			return fmt.Sprintf("held by %v, the model says free", got)
		}
		return ""
	}
	left := h.exp.Sub(r.now)
	want := map[string][]time.Duration{h.l.Token(): slices.Repeat([]time.Duration{left}, k.width(r, h.c))}
	if k.quorum > 0 && len(got) == 1 && len(got[h.l.Token()]) >= k.quorum {
		// On a quorum, the others lost their data.
		want[h.l.Token()] = want[h.l.Token()][:len(got[h.l.Token()])]
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		return fmt.Sprintf("held by %v, the model says %v (%v)", got, want, h)
	}
	return ""
}

// gaveUp says what remains in Redis of a Lock that gave up while the
// model's holder h held the lock: "" once its give-back has landed, when the
// holder is h's alone and nothing waits in the queue. The place it queued
// is given back too: left live after the call returned (a give-back past
// its budget goes on in the background), the holder's next release would
// hand the lock to it, for nobody (TestRegressGaveUpLockThenRelease).
func (k mutexKind) gaveUp(r *rig, prefix string, h *mlease) string {
	if msg := k.stranger(r, prefix, h); msg != "" {
		return msg
	}
	return k.noWaiter(r, prefix)
}

// noWaiter says which places are queued in Redis, live, although the
// model has no waiting call between its steps: "" when none.
func (k mutexKind) noWaiter(r *rig, prefix string) string {
	if q := k.waiting(r, prefix); len(q) > 0 {
		return fmt.Sprintf("queued %v, the model has no waiter", q)
	}
	return ""
}

// redlockFaults are the faults of one instance of a Redlock's: an
// instance that loses its data (restarted without persistence; the same
// one each time within a sequence), as long as the holder stays on a
// quorum, and a TryLock whose call to
// one instance is held up and arrives late, while the lease it may be
// granted is live.
func redlockFaults(r *rig, ls *leases, mus []primitives.Mutex, granted func(*rapid.T, int, latchkit.Lease, string)) map[string]func(*rapid.T) {
	// lost is the one instance that loses its data in this sequence: the
	// promise holds while no more than N-quorum instances (one of three)
	// have lost what they knew, and what an instance knew (a fence, a
	// release remembered for its retry) it forgets for good. A second
	// instance losing its data left a retried release remembered on one
	// instance of three (found in the long lane: ErrLeaseLost, outside the
	// stated condition).
	lost := -1
	return map[string]func(*rapid.T){
		"InstanceLosesData": func(t *rapid.T) {
			i := rapid.IntRange(0, len(r.servers())-1).Draw(t, "instance")
			ls.note(fmt.Sprint("i", i))
			if lost >= 0 && i != lost {
				t.Skip("another instance lost its data in this sequence")
			}
			r.settle()
			for _, h := range ls.live() {
				on := 0
				for _, m := range r.servers() {
					if v, err := m.Get(keyspace.MutexLayout.KeysOf(ls.prefix, "m")[0]); err == nil && strings.HasPrefix(v, h.l.Token()+" ") {
						on++
					}
				}
				if v, _ := r.servers()[i].Get(keyspace.MutexLayout.KeysOf(ls.prefix, "m")[0]); strings.HasPrefix(v, h.l.Token()+" ") && on <= 2 {
					t.Skip("the holder would be left on fewer than a quorum")
				}
			}
			r.servers()[i].FlushAll()
			lost = i
			// A restart takes time: the instance's clock, which its fence
			// counter starts from again, has moved on.
			r.advance(time.Millisecond)
		},
		"TryLockOneInstanceLate": func(t *rapid.T) {
			c := r.clientDraw(t, "client")
			i := rapid.IntRange(0, len(r.servers())-1).Draw(t, "instance")
			ls.note(fmt.Sprint("c", c, "i", i))
			held := len(ls.live()) > 0
			ls.touch()
			slow := r.clients[c]
			if i > 0 {
				slow = slow.more[i-1]
			}
			slow.px.Blackhole(true)
			ctx, cancel := ctxFor(callTimeout)
			l, err := mus[c].TryLock(ctx)
			cancel()
			slow.px.Blackhole(false)
			forwarded(slow.px)
			r.settle()
			if held {
				want(t, "TryLock of a held lock, one instance late", err, "ErrNotAcquired")
				return
			}
			if instancesLate(err) {
				eventually(t, "after a TryLock whose reachable instances answered late", func() string {
					if got := lockKeys(r, ls.prefix, "m"); len(got) > 0 {
						return fmt.Sprintf("held by %v, the model says free", got)
					}
					return ""
				})
				return
			}
			want(t, "TryLock of a free lock, one instance late", err, "nil")
			granted(t, c, l, "TryLock, one instance late")
		},
	}
}

// forwarded waits (at most 3 s) until px has written to its server what it
// held: settle waits for the clients' calls, and a late copy the proxy
// still held after they returned could land after the sequence's next
// actions (an instance's data loss first, then a grant nobody holds).
func forwarded(px *faultproxy.Proxy) {
	for deadline := time.Now().Add(3 * time.Second); px.Holding() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
