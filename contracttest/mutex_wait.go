package contracttest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// testWakeOnRelease: a waiter behind a holder acquires within milliseconds
// of the release, not after a polling interval. The holder holds long
// enough for a polling waiter's backoff to have grown to its cap (500ms).
func testWakeOnRelease(t *testing.T, h Harness) {
	holderB := h.NewClient(t).Backend
	waiterB := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	hm, _ := primitives.NewMutex(clienttest.For(t, holderB), "w", primitives.WithPrefix(p))
	wm, _ := primitives.NewMutex(clienttest.For(t, waiterB), "w", primitives.WithPrefix(p))
	var worst time.Duration
	for round := 0; round < lane.Pick(2, 3); round++ {
		l, err := hm.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			wl, err := wm.Lock(ctx)
			at := time.Now()
			if err != nil {
				t.Error(err)
			} else {
				wl.Release(ctx)
			}
			got <- at
		}()
		time.Sleep(1200 * time.Millisecond)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		at := <-got
		worst = max(worst, at.Sub(released))
	}
	t.Logf("worst handoff after release: %v", worst)
	if worst > 100*time.Millisecond {
		t.Errorf("waiter acquired %v after the release: it polled instead of being woken", worst)
	}
}

// testCommandsPerAcquisition: 16 goroutines contending for one mutex send
// at most 4 commands per acquisition on average (attempts, releases and
// subscription changes together): a release hands the lock over and wakes
// only the new holder, whose one confirming attempt is all it costs.
func testCommandsPerAcquisition(t *testing.T, h Harness) {
	c := h.NewClient(t)
	if c.Commands == nil {
		t.Skip("the harness cannot count commands")
	}
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	const goroutines, rounds = 16, 25
	// One Client for the 16 mutexes, as one process would have: they share
	// its subscription.
	cl := clienttest.For(t, c.Backend)
	before := c.Commands()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		m, _ := primitives.NewMutex(cl, "c", primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	per := float64(c.Commands()-before) / (goroutines * rounds)
	t.Logf("%.2f commands per acquisition (including its release)", per)
	if per > 4 {
		t.Errorf("%.2f commands per acquisition, want at most 4", per)
	}
}

// testDroppedSubscriptionWaiters: killing the pub/sub connection while a
// waiter sleeps does not strand it: it falls back to its timer, the
// subscription comes back, and the next release wakes it promptly again.
func testDroppedSubscriptionWaiters(t *testing.T, h Harness) {
	holderB := h.NewClient(t).Backend
	waiterB := h.NewClient(t).Backend
	ctx := ctxT(t, 30*time.Second)
	p := prefix(t)
	hm, _ := primitives.NewMutex(clienttest.For(t, holderB), "s", primitives.WithPrefix(p))
	wm, _ := primitives.NewMutex(clienttest.For(t, waiterB), "s", primitives.WithPrefix(p))
	l, err := hm.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		wl, err := wm.Lock(ctx)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		wl.Release(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	if !h.KillSubscribers(t) {
		l.Release(ctx)
		<-got
		t.Skip("the server cannot kill pub/sub connections")
	}
	// Give the hub time to notice and re-subscribe, then release: the
	// waiter must hear of it without waiting out the 10s TTL.
	time.Sleep(700 * time.Millisecond)
	// Where killing subscribers drops every connection (miniredis restarts),
	// the holder's release may meet a dead connection: retrying it is safe.
	for try := 0; ; try++ {
		err := l.Release(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrUnavailable) || try == 5 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	released := time.Now()
	select {
	case at := <-got:
		t.Logf("acquired %v after the release", at.Sub(released))
		if d := at.Sub(released); d > 2*time.Second {
			t.Errorf("waiter took %v after the release", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("waiter stranded after its subscription was killed")
	}
}
