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
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

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
