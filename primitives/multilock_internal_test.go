package primitives

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
)

// The one-name-at-a-time path that a Redis Cluster needs, forced on one
// server: all or nothing with rollback, and no deadlock between opposite
// orders.
func TestMultiLockSplitPath(t *testing.T) {
	m, b := newMiniBackend(t)
	ctx := context.Background()
	newSplit := func(names ...string) *multiLock {
		mu, err := NewMultiLock(testClient(t, b), names)
		if err != nil {
			t.Fatal(err)
		}
		ml := mu.(*multiLock)
		ml.split = true
		return ml
	}
	single, _ := NewMutex(testClient(t, b), "b")
	held, _ := single.TryLock(ctx)
	ml := newSplit("c", "b", "a")
	if _, err := ml.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("with b held: %v", err)
	}
	for _, n := range []string{"a", "c"} {
		if heldOn(m, "latch:{"+n+"}") {
			t.Errorf("rollback left %s held", n)
		}
	}
	held.Release(ctx)
	l, err := ml.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := l.(MultiLease).Fences(); len(f) != 3 || f["b"] < 2 {
		t.Errorf("fences %v", f)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, err := l.TTL(ctx); err != nil || d < 50*time.Second {
		t.Errorf("TTL %v %v", d, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if heldOn(m, "latch:{"+n+"}") {
			t.Errorf("%s held after release", n)
		}
	}

	// Opposite orders, many goroutines: everyone finishes.
	var wg sync.WaitGroup
	var inside sync.Map
	for g := 0; g < 8; g++ {
		names := []string{"x", "y", "z"}
		if g%2 == 1 {
			names = []string{"z", "y", "w"}
		}
		ml := newSplit(names...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				l, err := ml.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				for _, n := range names {
					if _, busy := inside.LoadOrStore(n, true); busy {
						t.Errorf("%s held twice", n)
					}
				}
				for _, n := range names {
					inside.Delete(n)
				}
				l.Release(ctx)
			}
		}()
	}
	wg.Wait()
}
