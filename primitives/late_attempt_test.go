package primitives

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// recorder is a backend that keeps a copy of every Eval it runs while
// recording, so that a test can run one again later: the late copy of a
// command the driver resent (go-redis after a read timeout), or that a
// proxy or a paused server delivered twice.
type recorder struct {
	backend.Backend
	mu    sync.Mutex
	on    bool
	calls []evalCopy
}

type evalCopy struct {
	s          *backend.Script
	keys, args []string
}

func (r *recorder) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	r.mu.Lock()
	if r.on {
		r.calls = append(r.calls, evalCopy{s, append([]string(nil), keys...), append([]string(nil), args...)})
	}
	r.mu.Unlock()
	return r.Backend.Eval(ctx, s, keys, args)
}

func (r *recorder) record(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = on
	if on {
		r.calls = nil
	}
}

// lateTTL is the lease time of the late-attempt tests: what a late copy of
// a released token's attempt may hold the name for.
const lateTTL = 300 * time.Millisecond

// afterLateCopy checks what a late copy of a released token's attempt may
// leave: at most a grant held by nobody, for at most its TTL. Another
// client is granted once that TTL has passed, with a fence above both the
// released lease's and the late copy's, and every key expires.
func afterLateCopy(t *testing.T, ctx context.Context, srv fairServer, prefix string, last int64, other func(context.Context) (latchkit.Lease, error)) {
	t.Helper()
	o, err := other(ctx)
	if errors.Is(err, latchkit.ErrNotAcquired) {
		t.Logf("the late copy was granted: a grant held by nobody, for at most its TTL (%v)", err)
		checkEveryKeyExpires(t, ctx, srv, prefix, "the late copy's grant")
		srv.pass(lateTTL + 50*time.Millisecond)
		o, err = other(ctx)
	}
	if err != nil {
		t.Fatalf("another client, a TTL after the late copy: %v", err)
	}
	if o.Fence() <= last {
		t.Errorf("fence %d after %d: not increasing", o.Fence(), last)
	}
	if err := o.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checkEveryKeyExpires(t, ctx, srv, prefix, "the late copy")
}

// TestLateAttemptAfterReleaseBounded: an attempt of token T was granted,
// and T's lease released; a copy of that attempt then reaches the server
// (a resend after a timeout whose first copy did run, a duplicate from a
// proxy: the client received the first copy's reply, so the copy can be
// late only if something between client and server held it past the
// holder's whole critical section). A release remembers nothing (only a
// give-back does, on the paths where the client could not learn the
// outcome), so the copy may be granted: a grant held by nobody, renewed by
// nobody, which frees the name after its TTL; fences keep increasing, and
// every key expires. (Until the common path stopped paying for it, every
// release remembered T for a minute and the copy was refused: issue 39.)
func TestLateAttemptAfterReleaseBounded(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			for _, waiting := range []bool{false, true} {
				how := "/TryLock"
				if waiting {
					how = "/Lock"
				}
				t.Run(k.name+how, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					prefix := "la:" + k.name + how + ":"
					rec := &recorder{Backend: srv.b}
					opts := []Option{WithPrefix(prefix), WithTTL(lateTTL), WithAutoExtend(false)}
					try, wait, err := k.open(testClient(t, rec), "n", opts...)
					if err != nil {
						t.Fatal(err)
					}
					other, _, err := k.open(testClient(t, srv.b), "n", opts...)
					if err != nil {
						t.Fatal(err)
					}
					acquire := try
					if waiting {
						acquire = wait
					}
					rec.record(true)
					l, err := acquire(ctx)
					rec.record(false)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						t.Fatal(err)
					}
					if len(rec.calls) == 0 {
						t.Fatal("no attempt recorded")
					}
					srv.pass(time.Millisecond)
					for _, c := range rec.calls { // every call the acquisition made, again, in order
						if _, err := srv.b.Eval(ctx, c.s, c.keys, c.args); err != nil {
							t.Logf("late copy: %v", err)
						}
					}
					afterLateCopy(t, ctx, srv, prefix, l.Fence(), other)
				})
			}
		}
	})
}

// TestLateAttemptAfterHandOverBounded: T's release handed the lock to a
// waiter, who then released it; a late copy of T's attempt may then be
// granted too, and is bounded the same way.
func TestLateAttemptAfterHandOverBounded(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range retryKinds {
			if k.queued == nil {
				continue // no hand-over
			}
			t.Run(k.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				prefix := "lh:" + k.name + ":"
				rec := &recorder{Backend: srv.b}
				opts := []Option{WithPrefix(prefix), WithTTL(5 * time.Second), WithAutoExtend(false)}
				try, _, err := k.open(testClient(t, rec), "n", opts...)
				if err != nil {
					t.Fatal(err)
				}
				// The copy replayed below asks for its own TTL: that of
				// the recorded attempt (5 s: the waiter must be handed the
				// lock well within it).
				other, wait, err := k.open(testClient(t, srv.b), "n", opts...)
				if err != nil {
					t.Fatal(err)
				}
				rec.record(true)
				a, err := try(ctx)
				rec.record(false)
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					l   latchkit.Lease
					err error
				}
				waiter := make(chan result, 1)
				go func() {
					l, err := wait(ctx)
					waiter <- result{l, err}
				}()
				for !k.queued(ctx, srv.c, prefix, "n") {
					if ctx.Err() != nil {
						t.Fatal("the waiter never queued")
					}
					time.Sleep(time.Millisecond)
				}
				if err := a.Release(ctx); err != nil {
					t.Fatal(err)
				}
				w := <-waiter
				if w.err != nil {
					t.Fatalf("the waiter, handed the lock: %v", w.err)
				}
				if err := w.l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				srv.pass(time.Millisecond)
				for _, c := range rec.calls {
					c.args[1] = kit.Ms(lateTTL) // the copy's TTL: short, so that the test can wait it out
					if _, err := srv.b.Eval(ctx, c.s, c.keys, c.args); err != nil {
						t.Logf("late copy: %v", err)
					}
				}
				afterLateCopy(t, ctx, srv, prefix, w.l.Fence(), other)
			})
		}
	})
}
