package contracttest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunMultiLock checks primitives.NewMultiLock on the backend.
func RunMultiLock(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"OverlappingSetsNoDeadlockNoLostUpdate", testMultiOverlap},
		{"AllOrNothing", testMultiAllOrNothing},
		{"BadInput", testMultiBadInput},
	})
}

// testMultiOverlap: two MultiLocks over overlapping names, given in
// opposite orders, 16 goroutines. Each holder increments, by GET then SET,
// a counter per name it holds: a lost update on any name means two holders
// overlapped; finishing at all means no deadlock.
func testMultiOverlap(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 2*time.Minute)
	sets := [][]string{{"a", "b", "c"}, {"c", "b", "d"}}
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend}
	const goroutines, rounds = 16, 15
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		b := clients[g%2]
		names := sets[g%2]
		m, err := primitives.NewMultiLock(clienttest.For(t, b), names, primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				fences := l.(primitives.MultiLease).Fences()
				if len(fences) != len(names) {
					t.Errorf("fences %v for names %v", fences, names)
				}
				for _, n := range names {
					if err := incr(ctx, b, p+"count:"+n, 0); err != nil {
						t.Error(err)
						return
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	want := map[string]int{"a": 8 * rounds, "b": 16 * rounds, "c": 16 * rounds, "d": 8 * rounds}
	for n, w := range want {
		if got := do(t, clients[0], "GET", p+"count:"+n); got != fmt.Sprint(w) {
			t.Errorf("counter %s = %v, want %d: an update was lost", n, got, w)
		}
	}
}

// testMultiAllOrNothing: when one name is held elsewhere an attempt takes
// none of the others, and a MultiLock excludes a Mutex of any of its names.
func testMultiAllOrNothing(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	single, _ := primitives.NewMutex(clienttest.For(t, b), "y", primitives.WithPrefix(p))
	held, err := single.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := primitives.NewMultiLock(clienttest.For(t, b), []string{"z", "y", "x"}, primitives.WithPrefix(p))
	if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("with y held: %v", err)
	}
	for _, n := range []string{"x", "z"} {
		if !lockFree(t, b, keyOf(p, n)) {
			t.Errorf("a failed attempt left %s held", n)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := single.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("a Mutex of a held name: %v", err)
	}
	fences := l.(primitives.MultiLease).Fences()
	if fences["y"] <= held.Fence() || l.Fence() < fences["x"] || l.Fence() < fences["z"] {
		t.Errorf("fences %v, Fence %d, y's previous %d", fences, l.Fence(), held.Fence())
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y", "z"} {
		if d := do(t, b, "PTTL", keyOf(p, n)).(int64); d < 50_000 {
			t.Errorf("Extend did not reach %s: pttl %d", n, d)
		}
	}
	// Lose one name: the lease is lost as a whole, and a release still
	// frees the names it holds, but never another holder's.
	do(t, b, "DEL", keyOf(p, "x"))
	thief, _ := single.TryLock(ctx) // y is still held by l: fails
	if thief != nil {
		t.Fatal("took y while the MultiLock holds it")
	}
	other, _ := primitives.NewMutex(clienttest.For(t, b), "x", primitives.WithPrefix(p))
	ol, err := other.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Extend with x lost: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Release with x lost: %v", err)
	}
	if got := do(t, b, "GET", keyOf(p, "x")); got != lockValue(ol) {
		t.Errorf("x's new holder was released")
	}
	for _, n := range []string{"y", "z"} {
		if !lockFree(t, b, keyOf(p, n)) {
			t.Errorf("%s still held after Release", n)
		}
	}
	ol.Release(ctx)
}

func testMultiBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 10*time.Second)
	for _, c := range []struct {
		what  string
		names []string
	}{
		{"no names", nil},
		{"empty list", []string{}},
		{"duplicate", []string{"a", "b", "a"}},
		{"empty name", []string{"a", ""}},
	} {
		if m, err := primitives.NewMultiLock(clienttest.For(t, b), c.names, primitives.WithPrefix(p)); !errors.Is(err, latchkit.ErrInvalid) || m != nil {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	if m, err := primitives.NewMultiLock(nil, []string{"a"}); !errors.Is(err, latchkit.ErrInvalid) || m != nil {
		t.Errorf("nil client: %v", err)
	}
	// One name's key is a hash: ErrInvalid, and no other name is taken.
	do(t, b, "HSET", keyOf(p, "q"), "f", "v")
	m, _ := primitives.NewMultiLock(clienttest.For(t, b), []string{"p", "q", "r"}, primitives.WithPrefix(p))
	if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("a name's key is a hash: %v", err)
	}
	for _, n := range []string{"p", "r"} {
		if !lockFree(t, b, keyOf(p, n)) {
			t.Errorf("%s was taken", n)
		}
	}
	if v := do(t, b, "HGET", keyOf(p, "q"), "f"); v != "v" {
		t.Errorf("the hash changed: %v", v)
	}
}
