package kit

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// TestBoundGiveBackWindow goes past the give-back window and the
// BackgroundTry bound of each try: against a server that never answers
// (each try waits until its context ends), the retries stop when the
// window has passed, and no try lasts longer than BackgroundTry, so that
// Close, which cuts the window short, is never held past a try.
func TestBoundGiveBackWindow(t *testing.T) {
	const window = 2500 * time.Millisecond
	var mu sync.Mutex
	var tries []time.Duration
	hung := func(ctx context.Context, _ string) error {
		start := time.Now()
		<-ctx.Done()
		mu.Lock()
		tries = append(tries, time.Since(start))
		mu.Unlock()
		return ctx.Err()
	}
	start := time.Now()
	RetryGiveBack(context.Background(), "tok", hung, window)
	took := time.Since(start)
	if took < window || took > window+200*time.Millisecond {
		t.Errorf("the retries stopped after %v, want at the window %v", took.Round(time.Millisecond), window)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tries) < 3 {
		t.Errorf("%d tries in a %v window, want at least 3 (each bounded by %v)", len(tries), window, BackgroundTry)
	}
	for i, d := range tries {
		if d > BackgroundTry+50*time.Millisecond {
			t.Errorf("try %d lasted %v, more than BackgroundTry %v", i+1, d.Round(time.Millisecond), BackgroundTry)
		}
	}
}

// TestBoundGiveBackWindowCap goes past the window's cap: a TTL (or waiter
// timeout) of two minutes is pursued for a minute, no more.
func TestBoundGiveBackWindowCap(t *testing.T) {
	for _, c := range []struct{ ttl, waiter, want time.Duration }{
		{10 * time.Second, 3 * time.Second, 11 * time.Second},
		{time.Second, 30 * time.Second, 31 * time.Second},
		{59 * time.Second, time.Second, time.Minute},
		{2 * time.Minute, time.Second, time.Minute},
		{time.Second, 2 * time.Minute, time.Minute},
	} {
		cfg := Config{TTL: c.ttl, WaiterTimeout: c.waiter}
		if got := cfg.Window(); got != c.want {
			t.Errorf("Window of ttl %v, waiter timeout %v: %v, want %v", c.ttl, c.waiter, got, c.want)
		}
		if l := (&Lease{ttl: c.ttl}); l.window() != min(c.ttl+time.Second, time.Minute) {
			t.Errorf("a lease's window of ttl %v: %v", c.ttl, l.window())
		}
	}
}

// TestGiveBackStopsAgainstRefusingServer: a server that refuses
// connections is tried for a second, not for the window, even when each
// try takes long (go-redis retries a refused dial for about 1.7 s itself,
// or until the try's deadline) or is cut by its deadline (issue 38,
// finding 2: the retries ran for the whole window, and Close past its
// context).
func TestGiveBackStopsAgainstRefusingServer(t *testing.T) {
	refused := &backend.Error{Class: backend.ErrUnavailable,
		Cause: fmt.Errorf("dial tcp 127.0.0.1:1: connect: %w", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		name string
		try  func(ctx context.Context) error
	}{
		{"slow refusal", func(ctx context.Context) error {
			time.Sleep(300 * time.Millisecond)
			return refused
		}},
		{"refusal cut by the try's deadline", func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("%w (last dial: %w)", ctx.Err(), refused)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			RetryGiveBack(context.Background(), "tok", func(ctx context.Context, _ string) error { return c.try(ctx) }, 10*time.Second)
			if took := time.Since(start); took > time.Second+BackgroundTry+200*time.Millisecond {
				t.Errorf("retries against a refusing server went on for %v", took.Round(time.Millisecond))
			}
		})
	}
}
