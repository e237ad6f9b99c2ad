package contracttest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunSemaphore checks primitives.NewSemaphore on the backend.
func RunSemaphore(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"NeverOverLimit", testSemaphoreLimit},
		{"CrashedHolderExpires", testSemaphoreExpiry},
		{"LeaseOps", testSemaphoreLease},
		{"BadInput", testSemaphoreBadInput},
	})
}

// testSemaphoreLimit: 64 goroutines, limit 5, random hold times. The number
// of holders is recorded at every grant and release and must never exceed
// 5; under load it must reach 5.
func testSemaphoreLimit(t *testing.T, h Harness) {
	const goroutines, rounds, limit = 64, 6, 5
	p := prefix(t)
	clients := make([]backend.Backend, 4)
	for i := range clients {
		clients[i] = h.NewClient(t).Backend
	}
	ctx := ctxT(t, 3*time.Minute)
	var holders gauge
	var fences sync.Map
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		s, err := primitives.NewSemaphore(clienttest.For(t, clients[g%len(clients)]), "s", limit, primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := holders.enter(); n > limit {
					t.Errorf("%d holders at once, limit %d", n, limit)
				}
				if _, dup := fences.LoadOrStore(l.Fence(), true); dup {
					t.Errorf("fence %d granted twice", l.Fence())
				}
				// Holds long against a script on a slow server (miniredis under -race
				// runs about one script per ms), so that the limit is what binds.
				time.Sleep(10*time.Millisecond + time.Duration(rand.IntN(20000))*time.Microsecond)
				holders.leave()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if holders.peak.Load() != limit {
		t.Errorf("peak holders %d, want the limit %d to be fully used", holders.peak.Load(), limit)
	}
}

// testSemaphoreExpiry: holders that vanish without releasing free their
// permits after their TTL, measured on the server's clock.
func testSemaphoreExpiry(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	s, _ := primitives.NewSemaphore(clienttest.For(t, b), "e", 2, primitives.WithPrefix(p), primitives.WithTTL(500*time.Millisecond), primitives.WithAutoExtend(false))
	for i := 0; i < 2; i++ {
		if _, err := s.TryAcquire(ctx); err != nil { // "crash": never released
			t.Fatal(err)
		}
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("third holder: %v, want ErrNotAcquired", err)
	}
	advance(t, h, 600*time.Millisecond)
	for i := 0; i < 2; i++ {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("after the holders' ttl: %v", err)
		}
		defer l.Release(ctx)
	}
	// A waiter behind full permits is granted when one expires, told so by
	// the wait hint (the earliest expiry), without any release message.
	w, _ := primitives.NewSemaphore(clienttest.For(t, b), "w", 1, primitives.WithPrefix(p), primitives.WithTTL(300*time.Millisecond), primitives.WithAutoExtend(false))
	if _, err := w.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := w.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("waiter took %v to get a permit whose holder expired after 300ms", d)
	}
}

func testSemaphoreLease(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	s, _ := primitives.NewSemaphore(clienttest.For(t, b), "l", 1, primitives.WithPrefix(p), primitives.WithTTL(400*time.Millisecond))
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Auto-extend keeps the permit past several TTLs.
	time.Sleep(1200 * time.Millisecond)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("permit lapsed under auto-extend: %v", err)
	}
	if d, err := l.TTL(ctx); err != nil || d <= 0 || d > 400*time.Millisecond {
		t.Errorf("TTL = %v, %v", d, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TTL(ctx); d < 50*time.Second {
		t.Errorf("TTL after Extend(1m) = %v", d)
	}
	f1 := l.Fence()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release: %v, want nil (what the first returned)", err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Extend after Release: %v, want ErrLeaseLost", err)
	}
	l2, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= f1 {
		t.Errorf("fence went from %d to %d", f1, l2.Fence())
	}
	// A lease whose permit was taken away cannot touch the next holder.
	do(t, b, "DEL", keyOf(p, "l")+":sem")
	l3, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Release(ctx)
	if err := l2.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Release of a removed permit: %v", err)
	}
	if err := l2.Extend(ctx, time.Hour); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Extend of a removed permit: %v", err)
	}
	if d, err := l3.TTL(ctx); err != nil || d > time.Minute {
		t.Errorf("next holder's TTL %v, %v", d, err)
	}
}

func testSemaphoreBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	for _, c := range []struct {
		what  string
		b     backend.Backend
		name  string
		limit int
	}{
		{"limit 0", b, "s", 0},
		{"negative limit", b, "s", -3},
		{"empty name", b, "", 1},
		{"nil backend", nil, "s", 1},
	} {
		s, err := primitives.NewSemaphore(clienttest.For(t, c.b), c.name, c.limit, primitives.WithPrefix(p))
		if !errors.Is(err, latchkit.ErrInvalid) || s != nil {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	// The holders key is a string: an error, and the value is untouched.
	key := keyOf(p, "w") + ":sem"
	do(t, b, "SET", key, "precious")
	s, _ := primitives.NewSemaphore(clienttest.For(t, b), "w", 3, primitives.WithPrefix(p))
	for _, acquire := range []func(context.Context) (latchkit.Lease, error){s.TryAcquire, s.Acquire} {
		if l, err := acquire(ctx); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
			t.Errorf("holders key is a string: %v, want ErrInvalid", err)
		}
	}
	if v := do(t, b, "GET", key); v != "precious" {
		t.Errorf("value changed to %v", v)
	}
	// The given-back tokens are a string: nothing is written.
	do(t, b, "DEL", key)
	do(t, b, "SET", key+":released", "precious")
	if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("given-back tokens a string: %v, want ErrInvalid", err)
	}
	if v := do(t, b, "EXISTS", key); v != int64(0) {
		t.Errorf("a holder was written although the given-back tokens are broken")
	}
	// latchkit 0.x's fence counter, whatever it holds, is neither read nor
	// written (fences come from the server's clock).
	do(t, b, "DEL", key+":released")
	do(t, b, "SET", key+":fence", "abc")
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Errorf("with latchkit 0.x's fence counter holding abc: %v, want granted", err)
	} else {
		l.Release(ctx)
	}
	if v := do(t, b, "GET", key+":fence"); v != "abc" {
		t.Errorf("latchkit 0.x's fence counter changed to %v", v)
	}
}
