package contracttest

import (
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// RunWeighted checks the weighted permits (AcquireN, TryAcquireN) and the
// stored limit (SetLimit) of Semaphore and FairSemaphore.
func RunWeighted(t *testing.T, h Harness) {
	for _, k := range semKinds {
		t.Run(k.name, func(t *testing.T) {
			runSteps(t, h, []step{
				{"NeverOverLimit", func(t *testing.T, h Harness) { testWeightedLimit(t, h, k) }},
				{"ReleaseGivesAllBack", func(t *testing.T, h Harness) { testWeightedRelease(t, h, k) }},
				{"CrashedHolderExpires", func(t *testing.T, h Harness) { testWeightedExpiry(t, h, k) }},
				{"BadInput", func(t *testing.T, h Harness) { testWeightedBadInput(t, h, k) }},
				{"SetLimitShared", func(t *testing.T, h Harness) { testSetLimitShared(t, h, k) }},
				{"SetLimitWakesWaiters", func(t *testing.T, h Harness) { testSetLimitWakes(t, h, k) }},
				{"SetLimitRacingNeverOverGrants", func(t *testing.T, h Harness) { testSetLimitRace(t, h, k) }},
			})
		})
	}
	runSteps(t, h, []step{
		{"WaiterForManyStallsNobody", testWeightedWaiterStallsNobody},
		{"FairHeadNotOvertaken", testFairHeadNotOvertaken},
		{"FairHeavyWaiterDropsOut", testFairHeavyWaiter},
		{"FairMutexIgnoresStoredLimit", testFairMutexIgnoresLimit},
	})
}

// semKind is one kind of semaphore: how to make it, and its layout.
type semKind struct {
	name   string
	new    func(c *primitives.Client, name string, limit int, opts ...primitives.Option) (primitives.Semaphore, error)
	layout keyspace.Layout
}

var semKinds = []semKind{
	{"Semaphore", primitives.NewSemaphore, keyspace.SemLayout},
	{"FairSemaphore", primitives.NewFairSemaphore, keyspace.FairLayout},
}

func (k semKind) make(t testing.TB, b backend.Backend, name string, limit int, opts ...primitives.Option) primitives.Semaphore {
	t.Helper()
	s, err := k.new(clienttest.For(t, b), name, limit, append([]primitives.Option{primitives.WithPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testWeightedLimit: 24 goroutines over 3 clients take 1 to 4 permits of
// 10 at a time (a third of the time by a single attempt), hold them for a
// while and give them back. The permits held, counted in the process with
// their weights at every grant and release, never exceed 10: one permit
// over-granted shows. Under load the limit must be nearly used.
func testWeightedLimit(t *testing.T, h Harness, k semKind) {
	const goroutines, rounds, limit = 24, 5, 10
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend, h.NewClient(t).Backend}
	ctx := ctxT(t, 3*time.Minute)
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		s := k.make(t, clients[g%len(clients)], "w", limit)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				n := 1 + rand.IntN(4)
				var l latchkit.Lease
				var err error
				if i%3 == 2 {
					l, err = s.TryAcquireN(ctx, n)
					if errors.Is(err, latchkit.ErrNotAcquired) {
						continue
					}
				} else {
					l, err = s.AcquireN(ctx, n)
				}
				if err != nil {
					t.Error(err)
					return
				}
				now := held.Add(int64(n))
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				if now > limit {
					t.Errorf("%d permits held at once, limit %d (this grant: %d)", now, limit, n)
				}
				time.Sleep(5*time.Millisecond + time.Duration(rand.IntN(15000))*time.Microsecond)
				held.Add(-int64(n))
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p < limit-3 {
		t.Errorf("peak permits held %d: the limit %d was never nearly used", p, limit)
	}
}

// testWeightedRelease: a lease of n permits gives all n back at once.
func testWeightedRelease(t *testing.T, h Harness, k semKind) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	s := k.make(t, b, "r", 5)
	l, err := s.TryAcquireN(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquireN(ctx, 2); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("2 more of 5 with 4 held: %v, want ErrNotAcquired", err)
	}
	one, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the fifth permit: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	all, err := s.TryAcquireN(ctx, 4)
	if err != nil {
		t.Fatalf("4 of 5 after the 4 were released: %v", err)
	}
	if all.Fence() <= one.Fence() || one.Fence() <= l.Fence() {
		t.Errorf("fences %d, %d, %d: not increasing", l.Fence(), one.Fence(), all.Fence())
	}
	one.Release(ctx)
	all.Release(ctx)
}

// testWeightedExpiry: a holder of n permits that never releases frees all
// n after its TTL, by the server's clock.
func testWeightedExpiry(t *testing.T, h Harness, k semKind) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	s := k.make(t, b, "e", 3, primitives.WithTTL(400*time.Millisecond), primitives.WithAutoExtend(false))
	if _, err := s.TryAcquireN(ctx, 3); err != nil { // "crash": never released
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("a permit while 3 of 3 are held: %v", err)
	}
	advance(t, h, 500*time.Millisecond)
	l, err := s.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatalf("3 permits after the holder's TTL: %v", err)
	}
	l.Release(ctx)
}

// keysState describes the keys as they are (type and content, not TTLs),
// for checks that a refused call changed nothing.
func keysState(t testing.TB, b backend.Backend, keys []string) string {
	t.Helper()
	var sb strings.Builder
	for _, key := range keys {
		typ := do(t, b, "TYPE", key)
		var v backend.Value
		switch fmt.Sprint(typ) {
		case "string":
			v = do(t, b, "GET", key)
		case "hash":
			v = do(t, b, "HGETALL", key)
			if a, ok := v.([]backend.Value); ok {
				pairs := make([]string, 0, len(a)/2)
				for i := 0; i+1 < len(a); i += 2 {
					pairs = append(pairs, fmt.Sprint(a[i], "=", a[i+1]))
				}
				sort.Strings(pairs)
				v = pairs
			}
		case "zset":
			v = do(t, b, "ZRANGE", key, "0", "-1", "WITHSCORES")
		case "list":
			v = do(t, b, "LRANGE", key, "0", "-1")
		}
		fmt.Fprintf(&sb, "%s %v %v\n", key, typ, v)
	}
	return sb.String()
}

// testWeightedBadInput: n below 1 is refused before anything is sent; n
// above the limit (the stored one when there is one) is refused by the
// script before it writes; SetLimit below 1 is refused before anything is
// sent; a weights or limit key holding another type fails with ErrInvalid
// and stays as it was. After each, every key of the semaphore is as it was.
func testWeightedBadInput(t *testing.T, h Harness, k semKind) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	s := k.make(t, b, "b", 3)
	keys := k.layout.KeysOf(p, "b")
	held, err := s.TryAcquire(ctx) // some state to keep
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	before := keysState(t, b, keys)
	type call struct {
		what string
		do   func() error
	}
	acq := func(f func(context.Context, int) (latchkit.Lease, error), n int) func() error {
		return func() error {
			l, err := f(ctx, n)
			if l != nil {
				t.Errorf("a lease for %d permits", n)
			}
			return err
		}
	}
	for _, c := range []call{
		{"AcquireN(0)", acq(s.AcquireN, 0)},
		{"AcquireN(-2)", acq(s.AcquireN, -2)},
		{"TryAcquireN(0)", acq(s.TryAcquireN, 0)},
		{"AcquireN(4) with limit 3", acq(s.AcquireN, 4)},
		{"TryAcquireN(4) with limit 3", acq(s.TryAcquireN, 4)},
		{"SetLimit(0)", func() error { return s.SetLimit(ctx, 0) }},
		{"SetLimit(-1)", func() error { return s.SetLimit(ctx, -1) }},
	} {
		if err := c.do(); !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
		if after := keysState(t, b, keys); after != before {
			t.Errorf("%s changed the keys:\nbefore\n%s\nafter\n%s", c.what, before, after)
		}
	}
	// Above a stored limit, below the constructor's: refused too.
	if err := s.SetLimit(ctx, 2); err != nil {
		t.Fatal(err)
	}
	before = keysState(t, b, keys)
	if l, err := s.AcquireN(ctx, 3); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
		t.Errorf("AcquireN(3) with the stored limit 2: %v, want ErrInvalid", err)
	}
	if after := keysState(t, b, keys); after != before {
		t.Errorf("AcquireN(3) above the stored limit changed the keys:\nbefore\n%s\nafter\n%s", before, after)
	}
	// Keys of another type: the weights hash is a string, the stored limit
	// a hash or not a number.
	weights, limitKey := keys[len(keys)-2], keys[len(keys)-1]
	for _, bad := range []struct {
		what string
		set  []string
	}{
		{"weights key is a string", []string{"SET", weights, "precious"}},
		{"limit key is a hash", []string{"HSET", limitKey, "f", "v"}},
		{"limit key is not a number", []string{"SET", limitKey, "lots"}},
	} {
		do(t, b, "DEL", limitKey)
		do(t, b, bad.set[0], bad.set[1], bad.set[2:]...)
		before := keysState(t, b, keys)
		for _, c := range []call{
			{"TryAcquireN(2)", acq(s.TryAcquireN, 2)},
			{"AcquireN(2)", acq(s.AcquireN, 2)},
			{"TryAcquire", func() error { _, err := s.TryAcquire(ctx); return err }},
		} {
			if err := c.do(); !errors.Is(err, latchkit.ErrInvalid) {
				t.Errorf("%s: %s: %v, want ErrInvalid", bad.what, c.what, err)
			}
		}
		if bad.set[1] == limitKey {
			if err := s.SetLimit(ctx, 5); !errors.Is(err, latchkit.ErrInvalid) {
				t.Errorf("%s: SetLimit: %v, want ErrInvalid", bad.what, err)
			}
		}
		if after := keysState(t, b, keys); after != before {
			t.Errorf("%s: the keys changed:\nbefore\n%s\nafter\n%s", bad.what, before, after)
		}
		do(t, b, "DEL", bad.set[1])
	}
}

// testSetLimitShared: a limit stored by one client is the limit of every
// client of the name, whatever limit they were made with; lowering it below
// the permits held revokes nothing and grants nothing new until they drop
// below it.
func testSetLimitShared(t *testing.T, h Harness, k semKind) {
	ctx := ctxT(t, 20*time.Second)
	a := k.make(t, h.NewClient(t).Backend, "s", 2)
	b := k.make(t, h.NewClient(t).Backend, "s", 2)
	if err := a.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var ls []latchkit.Lease
	for i := 0; i < 3; i++ {
		l, err := b.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of the stored limit 3, by a client made with 2: %v", i+1, err)
		}
		ls = append(ls, l)
	}
	if _, err := a.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("a fourth permit of 3: %v", err)
	}
	if err := b.SetLimit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("holder %d after the limit was lowered: %v (nothing is revoked)", i, err)
		}
	}
	for len(ls) > 0 {
		if l, err := a.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("granted with %d permits held and the limit lowered to 1: %v", len(ls), err)
			l.Release(ctx)
		}
		if err := ls[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		ls = ls[1:]
	}
	l, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the one permit once every holder left: %v", err)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("a second permit of the stored limit 1: %v", err)
	}
	l.Release(ctx)
}

// testSetLimitWakes: a waiter for 2 permits blocked by a holder of both is
// granted as soon as SetLimit raises the limit to 4, woken by it: its retry
// policy would have it sleep for 30 s, and its waiter timeout is a minute.
func testSetLimitWakes(t *testing.T, h Harness, k semKind) {
	ctx := ctxT(t, 20*time.Second)
	slow := primitives.WithRetry(retry.Constant(30 * time.Second))
	s := k.make(t, h.NewClient(t).Backend, "k", 2, slow, primitives.WithWaiterTimeout(time.Minute))
	w := k.make(t, h.NewClient(t).Backend, "k", 2, slow, primitives.WithWaiterTimeout(time.Minute))
	l, err := s.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := w.AcquireN(ctx, 2)
		if err == nil {
			defer l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is asleep
	select {
	case err := <-got:
		t.Fatalf("the waiter returned before the limit was raised: %v", err)
	default:
	}
	start := time.Now()
	if err := s.SetLimit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter for 2 permits after the limit was raised from 2 to 4: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("waiter granted %v after SetLimit", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by SetLimit within 10 s (its retry policy sleeps 30 s)")
	}
}

// testSetLimitRace: clients take 1 to 3 permits while another flips the
// stored limit between 2 and 6. Every grant is checked against the limits
// that can have been in force during its call: a grant made while SetLimit
// had set 2 before the call began (and set nothing since) must find room
// for its permits among the holders that surely held through its call
// (their acquisition returned before it began; their release began after it
// returned).
func testSetLimitRace(t *testing.T, h Harness, k semKind) {
	const workers = 8
	ctx := ctxT(t, 2*time.Minute)
	setter := k.make(t, h.NewClient(t).Backend, "x", 6)
	type span struct{ start, end time.Time }
	type grant struct {
		n        int
		call     span // the acquisition's call
		released time.Time
	}
	type setting struct {
		limit int
		call  span
	}
	var mu sync.Mutex
	var grants []grant
	var settings []setting
	stop := make(chan struct{})
	var setWG sync.WaitGroup
	setWG.Add(1)
	go func() {
		defer setWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+rand.IntN(30)) * time.Millisecond):
			}
			limit := 2
			if i%2 == 1 {
				limit = 6
			}
			start := time.Now()
			if err := setter.SetLimit(ctx, limit); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			settings = append(settings, setting{limit, span{start, time.Now()}})
			mu.Unlock()
		}
	}()
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend}
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		s := k.make(t, clients[g%2], "x", 6)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				n := 1 + rand.IntN(2)
				start := time.Now()
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := s.AcquireN(wctx, n)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
						return
					}
					continue
				}
				got := span{start, time.Now()}
				time.Sleep(time.Duration(2+rand.IntN(10)) * time.Millisecond)
				rel := time.Now()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				grants = append(grants, grant{n, got, rel})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	setWG.Wait()
	// For each grant, the limit surely in force through its call: the last
	// setting that returned before the call began, when no setting was in
	// flight or made during the call.
	checked := 0
	for _, g := range grants {
		limit := 0
		var last time.Time
		clear := true
		for _, s := range settings {
			if s.call.end.Before(g.call.start) && s.call.end.After(last) {
				limit, last = s.limit, s.call.end
			}
			if !s.call.end.Before(g.call.start) && s.call.start.Before(g.call.end) {
				clear = false // a SetLimit overlapping the call
			}
		}
		if !clear || limit != 2 {
			continue
		}
		checked++
		surely := g.n
		for _, o := range grants {
			if o.call.end.Before(g.call.start) && o.released.After(g.call.end) {
				surely += o.n
			}
		}
		if surely > limit {
			t.Errorf("a grant of %d permits while the stored limit was %d and %d permits surely held", g.n, limit, surely-g.n)
		}
	}
	t.Logf("%d grants, %d SetLimits; %d grants made under a limit of 2 checked", len(grants), len(settings), checked)
	if len(grants) == 0 {
		t.Error("no grant was made")
	}
}

// testFairHeadNotOvertaken: with 3 of 4 permits held, a waiter for 4 at the
// head of the queue is not overtaken by a waiter for 1 behind it, although
// one permit is free, nor by a TryAcquire: it is granted first once the 3
// are released, and the one behind it only once it has released.
func testFairHeadNotOvertaken(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	mk := func() primitives.Semaphore {
		return semKinds[1].make(t, h.NewClient(t).Backend, "h", 4)
	}
	ob := h.NewClient(t).Backend
	holder, big, small := mk(), mk(), mk()
	l3, err := holder.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		l   latchkit.Lease
		err error
	}
	got := make(chan result, 2)
	go func() { l, err := big.AcquireN(ctx, 4); got <- result{"big", l, err} }()
	eventually(t, 5*time.Second, "the waiter for 4 is queued", func() bool { return queueLen(t, ob, prefix(t), "h") == 2 })
	go func() { l, err := small.Acquire(ctx); got <- result{"small", l, err} }()
	eventually(t, 5*time.Second, "the waiter for 1 is queued", func() bool { return queueLen(t, ob, prefix(t), "h") == 3 })
	if l, err := holder.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryAcquire overtook the waiter for 4 at the head: %v", err)
		l.Release(ctx)
	}
	select {
	case r := <-got:
		t.Fatalf("%s granted while 3 of 4 permits are held and the waiter for 4 is at the head: %v", r.who, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.who != "big" {
		t.Fatalf("first granted after the release: %s (%v), want the waiter for 4", r.who, r.err)
	}
	select {
	case r2 := <-got:
		t.Fatalf("%s granted while the waiter for 4 holds all 4: %v", r2.who, r2.err)
	case <-time.After(300 * time.Millisecond):
	}
	r.l.Release(ctx)
	r2 := <-got
	if r2.err != nil {
		t.Fatalf("the waiter for 1 after the waiter for 4 released: %v", r2.err)
	}
	if r2.l.Fence() <= r.l.Fence() {
		t.Errorf("fences %d then %d", r.l.Fence(), r2.l.Fence())
	}
	r2.l.Release(ctx)
}

// testFairHeavyWaiter: a waiter for 4 permits at the head when SetLimit
// lowers the limit to 3 can never be granted: it fails with ErrInvalid
// (woken by SetLimit, not at its next heartbeat), and the waiter behind it
// is granted without waiting for it to leave.
func testFairHeavyWaiter(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	slow := []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)), primitives.WithWaiterTimeout(time.Minute)}
	mk := func() primitives.Semaphore { return semKinds[1].make(t, h.NewClient(t).Backend, "v", 4, slow...) }
	ob := h.NewClient(t).Backend
	holder, big, small := mk(), mk(), mk()
	l2, err := holder.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	bigErr, smallErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := big.AcquireN(ctx, 4); bigErr <- err }()
	eventually(t, 5*time.Second, "the waiter for 4 is queued", func() bool { return queueLen(t, ob, prefix(t), "v") == 2 })
	go func() {
		l, err := small.AcquireN(ctx, 1)
		if err == nil {
			defer l.Release(ctx)
		}
		smallErr <- err
	}()
	eventually(t, 5*time.Second, "the waiter for 1 is queued", func() bool { return queueLen(t, ob, prefix(t), "v") == 3 })
	if err := holder.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		what string
		c    chan error
		want error
	}{{"the waiter for 1", smallErr, nil}, {"the waiter for 4", bigErr, latchkit.ErrInvalid}} {
		select {
		case err := <-w.c:
			if (w.want == nil && err != nil) || (w.want != nil && !errors.Is(err, w.want)) {
				t.Errorf("%s after the limit was lowered to 3: %v, want %v", w.what, err, w.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no outcome 10 s after SetLimit (its retry policy sleeps 30 s)", w.what)
		}
	}
	eventually(t, 5*time.Second, "the waiter for 4 leaves the queue", func() bool { return queueLen(t, ob, prefix(t), "v") <= 1 })
}

// testFairMutexIgnoresLimit: a FairMutex is one permit, whatever limit a
// FairSemaphore of the same name stored.
func testFairMutexIgnoresLimit(t *testing.T, h Harness) {
	ctx := ctxT(t, 20*time.Second)
	b := h.NewClient(t).Backend
	s := semKinds[1].make(t, b, "m", 1)
	if err := s.SetLimit(ctx, 3); err != nil {
		t.Fatal(err)
	}
	m, err := primitives.NewFairMutex(clienttest.For(t, b), "m", primitives.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l2, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("a second FairMutex holder after a FairSemaphore stored the limit 3: %v", err)
		l2.Release(ctx)
	}
}

// testWeightedWaiterStallsNobody: on a Semaphore of 2 permits, both held,
// a waiter for 2 and then a waiter for 1 wait in one process. A release of
// one permit cannot serve the first; it must still wake the second, which
// fits, rather than only the oldest waiter: the holders' TTL (the wait
// hint) is 30 s and the waiters' retry policy sleeps 30 s.
func testWeightedWaiterStallsNobody(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	slow := []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)),
		primitives.WithWaiterTimeout(time.Minute), primitives.WithTTL(30 * time.Second)}
	b := h.NewClient(t).Backend
	s := semKinds[0].make(t, b, "st", 2, slow...)
	h1, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(ctx)
	bigCtx, cancelBig := context.WithCancel(ctx)
	defer cancelBig()
	go func() {
		if l, err := s.AcquireN(bigCtx, 2); err == nil {
			l.Release(ctx)
		}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter for 2 is the oldest, asleep
	got := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx)
		if err == nil {
			l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the waiter for 1 was granted %v after the release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter for 1 was not granted within 10 s of a release that freed the permit it needs (woken: only the waiter for 2 ahead of it?)")
	}
}
