package primitives

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
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

// TestLateAttemptAfterReleaseRefused: an attempt of token T was granted,
// and T's lease released; a copy of that attempt then reaches the server
// (a resend after a timeout whose first copy did run, a duplicate from a
// proxy). It must grant nothing: T's acquisition is over, and a grant to
// T would be a lock held by nobody for its TTL (issue 28, finding 5; issue
// 29, item 3). The release remembers T among the name's finished tokens,
// which every attempt checks, as a give-back does.
func TestLateAttemptAfterReleaseRefused(t *testing.T) {
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
					opts := []Option{WithPrefix(prefix), WithTTL(5 * time.Second), WithAutoExtend(false)}
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
					o, err := other(ctx)
					if errors.Is(err, latchkit.ErrNotAcquired) {
						t.Fatalf("after a late copy of an attempt whose lease was granted and released, another client: %v: the late copy was granted (a lock held by nobody)", err)
					}
					if err != nil {
						t.Fatal(err)
					}
					if o.Fence() <= l.Fence() {
						t.Errorf("fence %d after %d: not increasing", o.Fence(), l.Fence())
					}
					if err := o.Release(ctx); err != nil {
						t.Fatal(err)
					}
					checkEveryKeyExpires(t, ctx, srv, prefix, "the late copy")
				})
			}
		}
	})
}

// TestLateAttemptAfterHandOverRefused: T's release handed the lock to a
// waiter, who then released it; a late copy of T's attempt must grant
// nothing either: the release that hands over remembers T as one that
// frees does.
func TestLateAttemptAfterHandOverRefused(t *testing.T) {
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
					if _, err := srv.b.Eval(ctx, c.s, c.keys, c.args); err != nil {
						t.Logf("late copy: %v", err)
					}
				}
				o, err := other(ctx)
				if errors.Is(err, latchkit.ErrNotAcquired) {
					t.Fatalf("after a late copy of an attempt whose lease was released by a hand-over, another client: %v: the late copy was granted (a lock held by nobody)", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := o.Release(ctx); err != nil {
					t.Fatal(err)
				}
				checkEveryKeyExpires(t, ctx, srv, prefix, "the late copy")
			})
		}
	})
}
