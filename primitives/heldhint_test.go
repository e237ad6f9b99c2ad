package primitives_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

var (
	heldUpTo   = regexp.MustCompile(`held for up to ([0-9.]+[a-zµ]+)`)
	heldOrMore = regexp.MustCompile(`had ([0-9.]+[a-zµ]+) or more to run`)
)

// checkHeldText checks what a refused call's error says of the hold
// against the holder's remaining TTL (ttl, read after the call): a "held
// for up to D" must be the holder's remaining time, a "D or more" no more
// than it, and the error must say one of them (issue 28, finding 11: a
// waiting Lock's error said "held for up to 1s", its waiter's heartbeat,
// of a holder with 5s to run).
func checkHeldText(t *testing.T, what string, err error, ttl time.Duration) {
	t.Helper()
	const tolerance = 500 * time.Millisecond
	var he *latchkit.HeldError
	if !errors.As(err, &he) {
		t.Errorf("%s: %v, want a *latchkit.HeldError", what, err)
		return
	}
	if he.WaitHint > ttl+tolerance {
		t.Errorf("%s: wait hint %v, above the holder's remaining TTL %v", what, he.WaitHint, ttl)
	}
	msg := err.Error()
	said := false
	for _, m := range heldUpTo.FindAllStringSubmatch(msg, -1) {
		said = true
		if d, perr := time.ParseDuration(m[1]); perr != nil || d < ttl-tolerance || d > ttl+tolerance {
			t.Errorf("%s: %q says held for up to %s, the holder's lease has %v to run", what, msg, m[1], ttl)
		}
	}
	for _, m := range heldOrMore.FindAllStringSubmatch(msg, -1) {
		said = true
		if d, perr := time.ParseDuration(m[1]); perr != nil || d > ttl+tolerance {
			t.Errorf("%s: %q says %s or more, the holder's lease has %v to run", what, msg, m[1], ttl)
		}
	}
	if !said {
		t.Errorf("%s: %q says nothing of how long the primitive is held", what, msg)
	}
}

// TestHeldErrorTellsHolderTTL: A holds a primitive with a 5s TTL; B's
// waiting call (200ms deadline) and B's single attempt fail, and their
// errors tell the truth about the hold: a waiting attempt's wait hint is
// its heartbeat (a third of the waiter timeout, 1s) when the holder's
// lease runs longer, and its error says so ("1s or more"), not that the
// primitive is held for up to 1s.
func TestHeldErrorTellsHolderTTL(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	const ttl = 5 * time.Second
	type calls struct {
		wait, try func(context.Context) (latchkit.Lease, error)
	}
	kinds := []struct {
		name string
		mk   func(name string) (calls, error)
	}{
		{"Mutex", func(n string) (calls, error) {
			x, err := primitives.NewMutex(clienttest.For(t, b), n, primitives.WithTTL(ttl))
			return calls{x.Lock, x.TryLock}, err
		}},
		{"ReentrantMutex", func(n string) (calls, error) {
			x, err := primitives.NewReentrantMutex(clienttest.For(t, b), n, primitives.WithTTL(ttl))
			return calls{x.Lock, x.TryLock}, err
		}},
		{"FairMutex", func(n string) (calls, error) {
			x, err := primitives.NewFairMutex(clienttest.For(t, b), n, primitives.WithTTL(ttl))
			return calls{x.Lock, x.TryLock}, err
		}},
		{"Semaphore(1)", func(n string) (calls, error) {
			x, err := primitives.NewSemaphore(clienttest.For(t, b), n, 1, primitives.WithTTL(ttl))
			return calls{x.Acquire, x.TryAcquire}, err
		}},
		{"FairSemaphore(1)", func(n string) (calls, error) {
			x, err := primitives.NewFairSemaphore(clienttest.For(t, b), n, 1, primitives.WithTTL(ttl))
			return calls{x.Acquire, x.TryAcquire}, err
		}},
		{"RWLock write", func(n string) (calls, error) {
			x, err := primitives.NewRWLock(clienttest.For(t, b), n, primitives.WithTTL(ttl))
			return calls{x.Lock, x.TryLock}, err
		}},
		{"MultiLock", func(n string) (calls, error) {
			x, err := primitives.NewMultiLock(clienttest.For(t, b), []string{n + ":a", n + ":b"}, primitives.WithTTL(ttl))
			return calls{x.Lock, x.TryLock}, err
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a, err := k.mk(t.Name())
			if err != nil {
				t.Fatal(err)
			}
			l, err := a.wait(primitives.WithOwner(context.Background(), "A"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			bc, err := k.mk(t.Name())
			if err != nil {
				t.Fatal(err)
			}
			ctxB := primitives.WithOwner(context.Background(), "B")
			ctx, cancel := context.WithTimeout(ctxB, 200*time.Millisecond)
			_, werr := bc.wait(ctx)
			cancel()
			_, terr := bc.try(ctxB)
			left, err := l.TTL(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("holder's TTL %v\n  wait: %v\n  try:  %v", left, werr, terr)
			if !errors.Is(werr, context.DeadlineExceeded) {
				t.Errorf("wait: %v, want it to match context.DeadlineExceeded", werr)
			}
			checkHeldText(t, "wait", werr, left)
			checkHeldText(t, "try", terr, left)
		})
	}
}
