package contracttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// RunReentrant checks primitives.NewReentrantMutex on the backend.
func RunReentrant(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"NestedDepth5", testReentrantDepth},
		{"NoOwner", testReentrantNoOwner},
		{"TryWhileOwnLockInFlight", testReentrantTryDoesNotWait},
	})
}

// testReentrantTryDoesNotWait: while an owner's Lock waits (another owner
// holds the mutex), the same owner's TryLock on another goroutine makes no
// wait: it reports ErrNotAcquired at once instead of waiting for the Lock.
func testReentrantTryDoesNotWait(t *testing.T, h Harness) {
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	m, err := primitives.NewReentrantMutex(clienttest.For(t, h.NewClient(t).Backend), "r", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	rival, _ := primitives.NewReentrantMutex(clienttest.For(t, h.NewClient(t).Backend), "r", primitives.WithPrefix(p))
	alice := primitives.WithOwner(ctx, "alice")
	held, err := rival.Lock(primitives.WithOwner(ctx, "bob"))
	if err != nil {
		t.Fatal(err)
	}
	lockCtx, cancelLock := context.WithCancel(alice)
	done := make(chan error, 1)
	go func() {
		l, err := m.Lock(lockCtx)
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // alice's Lock is waiting
	start := time.Now()
	tryCtx, cancelTry := context.WithTimeout(alice, 3*time.Second)
	_, err = m.TryLock(tryCtx)
	cancelTry()
	if took := time.Since(start); !errors.Is(err, latchkit.ErrNotAcquired) || took > time.Second {
		t.Errorf("TryLock while the same owner's Lock waits: %v after %v, want ErrNotAcquired at once", err, took)
	}
	cancelLock()
	<-done
	held.Release(ctx)
}

// testReentrantDepth: one owner nests Lock/Release 5 deep. The Redis key is
// held (with the same token) until the last release; a second owner is
// excluded throughout; re-entries send no command.
func testReentrantDepth(t *testing.T, h Harness) {
	c := h.NewClient(t)
	other := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 20*time.Second)
	key := keyOf(p, "r")
	m, err := primitives.NewReentrantMutex(clienttest.For(t, c.Backend), "r", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	rival, _ := primitives.NewReentrantMutex(clienttest.For(t, other), "r", primitives.WithPrefix(p))
	plain, _ := primitives.NewMutex(clienttest.For(t, other), "r", primitives.WithPrefix(p))
	alice := primitives.WithOwner(ctx, "alice")
	bob := primitives.WithOwner(ctx, "bob")

	excluded := func(when string) {
		t.Helper()
		if _, err := rival.TryLock(bob); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Errorf("%s: second owner: %v, want ErrNotAcquired", when, err)
		}
		if _, err := plain.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Errorf("%s: a plain Mutex of the same name: %v, want ErrNotAcquired", when, err)
		}
	}
	var leases []latchkit.Lease
	for depth := 1; depth <= 5; depth++ {
		var before int64
		if c.Commands != nil {
			before = c.Commands()
		}
		l, err := m.Lock(alice)
		if err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		if depth > 1 && c.Commands != nil && c.Commands() != before {
			t.Errorf("depth %d: re-entry sent %d commands, want none", depth, c.Commands()-before)
		}
		if depth > 1 && (l.Token() != leases[0].Token() || l.Fence() != leases[0].Fence()) {
			t.Errorf("depth %d: a re-entry is a new grant", depth)
		}
		leases = append(leases, l)
		excluded("while nested")
	}
	if err := leases[2].Extend(ctx, time.Minute); err != nil {
		t.Errorf("extend at depth 3: %v", err)
	}
	if d := do(t, c.Backend, "PTTL", key).(int64); d < 50_000 {
		t.Errorf("extend at depth 3 did not extend the lock: pttl %d", d)
	}
	for i := len(leases) - 1; i >= 1; i-- {
		if err := leases[i].Release(ctx); err != nil {
			t.Fatalf("release depth %d: %v", i+1, err)
		}
		if got := do(t, c.Backend, "GET", key); got != lockValue(leases[0]) {
			t.Fatalf("after releasing depth %d the key holds %v", i+1, got)
		}
		excluded("after an inner release")
	}
	// Releasing a level twice returns what its Release returned and
	// gives up no other level: the lock stays held.
	if err := leases[3].Release(ctx); err != nil {
		t.Errorf("releasing a level twice: %v, want nil", err)
	}
	if _, err := leases[3].TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("TTL of a released level: %v, want ErrLeaseLost", err)
	}
	if got := do(t, c.Backend, "GET", key); got != lockValue(leases[0]) {
		t.Fatalf("after releasing a level twice the key holds %v", got)
	}
	excluded("after releasing a level twice")
	if err := leases[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !lockFree(t, c.Backend, key) {
		t.Errorf("the lock is held after the outermost release")
	}
	l, err := rival.TryLock(bob)
	if err != nil {
		t.Fatalf("second owner after the outermost release: %v", err)
	}
	l.Release(ctx)
}

func testReentrantNoOwner(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	ctx := ctxT(t, 10*time.Second)
	m, _ := primitives.NewReentrantMutex(clienttest.For(t, b), "n", primitives.WithPrefix(p))
	for _, f := range []func(context.Context) (latchkit.Lease, error){m.Lock, m.TryLock} {
		if l, err := f(ctx); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
			t.Errorf("no owner: %v, want ErrInvalid", err)
		}
	}
	if v := do(t, b, "EXISTS", keyOf(p, "n")); v != int64(0) {
		t.Errorf("a Lock without an owner wrote the key")
	}
}
