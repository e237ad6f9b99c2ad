package contracttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
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
	// Not renewed, and long: a renewal would change the keys between two
	// looks.
	s := k.make(t, b, "b", 3, primitives.WithTTL(time.Minute), primitives.WithAutoExtend(false))
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
	scripted := keys[:k.layout.Scripted()] // the legacy keys follow
	weights, limitKey := scripted[len(scripted)-2], scripted[len(scripted)-1]
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
