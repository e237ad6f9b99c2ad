package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// refusingACLs are users whose every campaign the server refuses (NOPERM)
// however often it is tried.
var refusingACLs = []struct {
	name string
	acl  []any
}{
	{"no scripts", []any{"ACL", "SETUSER", "svc", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval"}},
	{"no keys", []any{"ACL", "SETUSER", "svc", "on", ">pw", "~other:*", "&*", "+@all"}},
}

// noperm fails t unless err is the server's NOPERM refusal: a
// *backend.ReplyError saying NOPERM, not the context's error.
func noperm(t *testing.T, what string, err error) {
	t.Helper()
	var re *backend.ReplyError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want the server's NOPERM", what)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		t.Errorf("%s: %v, want the server's NOPERM, not the context's end", what, err)
	case !errors.As(err, &re) || !strings.Contains(err.Error(), "NOPERM"):
		t.Errorf("%s: %v, want a *backend.ReplyError saying NOPERM", what, err)
	}
}

// TestElectionRunEndsOnPermanentRefusal: when the server refuses every
// campaign for a reason retrying cannot change (NOPERM: an ACL without the
// script commands, or without the keys), Run returns at once with an error
// that wraps the refusal and says NOPERM, instead of campaigning until its
// context ends; and Observe closes its channel (Leader then says why)
// instead of staying silent until its context ends.
func TestElectionRunEndsOnPermanentRefusal(t *testing.T) {
	for _, tc := range refusingACLs {
		for _, d := range aclDrivers {
			t.Run(tc.name+"/"+d.name, func(t *testing.T) { testRunRefused(t, tc.acl, d.make) })
		}
	}
}

func testRunRefused(t *testing.T, acl []any, newBackend func(*testing.T, string) backend.Backend) {
	admin := aclServer(t, acl)
	e, err := primitives.NewElection(clienttest.For(t, newBackend(t, admin.Options().Addr)), "refused")
	if err != nil {
		t.Fatal(err)
	}
	const patience = 4 * time.Second // Run and Observe must each be done well before
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	start := time.Now()
	err = e.Run(ctx, "a", func(context.Context, latchkit.Lease) error {
		t.Error("fn called: the campaign cannot have led")
		return nil
	})
	if d := time.Since(start); d > patience/2 {
		t.Errorf("Run returned after %v, want at once", d.Round(time.Millisecond))
	}
	noperm(t, "Run", err)

	ctx, cancel = context.WithTimeout(context.Background(), patience)
	defer cancel()
	start = time.Now()
	for info := range e.Observe(ctx) {
		t.Errorf("Observe delivered %+v, want nothing", info)
	}
	if d := time.Since(start); d > patience/2 {
		t.Errorf("Observe's channel closed after %v, want at once", d.Round(time.Millisecond))
	}
	_, err = e.Leader(ctx)
	noperm(t, "Leader after Observe closed", err)
}

// runElection returns an Election named "run" on a fresh miniredis, and
// the server.
func runElection(t *testing.T, opts ...primitives.Option) (primitives.Election, *miniredis.Miniredis, backend.Backend) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	e, err := primitives.NewElection(clienttest.For(t, b), "run", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e, m, b
}

// runAsync runs e.Run in the background; its result arrives on the channel.
func runAsync(ctx context.Context, e primitives.Election, value string, fn func(context.Context, latchkit.Lease) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, value, fn) }()
	return done
}

// await returns what done delivers within d, or fails t.
func await(t *testing.T, what string, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: Run had not returned after %v", what, d)
		return nil
	}
}

// noLeader fails t unless the seat of e is empty (Run resigned).
func noLeader(t *testing.T, e primitives.Election, what string) {
	t.Helper()
	if info, err := e.Leader(context.Background()); !errors.Is(err, primitives.ErrNoLeader) {
		t.Errorf("%s: Leader = %+v, %v; want ErrNoLeader (Run resigned)", what, info, err)
	}
}

// TestElectionRunGivesTheLease: fn receives the leadership lease: its
// Fence is the one Leader reports, its Name the election's, and its
// Context is live while fn runs; fn's ctx is live too. fn returning nil
// ends Run with nil after resigning.
func TestElectionRunGivesTheLease(t *testing.T) {
	e, _, _ := runElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var terms atomic.Int32
	err := e.Run(ctx, "pod-7", func(fctx context.Context, leader latchkit.Lease) error {
		terms.Add(1)
		if leader == nil {
			t.Fatal("fn got a nil lease")
		}
		info, err := e.Leader(fctx)
		if err != nil {
			t.Fatalf("Leader while fn runs: %v", err)
		}
		if info.Value != "pod-7" || info.Fence != leader.Fence() || leader.Fence() <= 0 {
			t.Errorf("Leader = %+v, fn's lease fence %d: want pod-7 with the lease's fence", info, leader.Fence())
		}
		if leader.Name() != "run" {
			t.Errorf("lease name %q, want run", leader.Name())
		}
		if fctx.Err() != nil || leader.Context().Err() != nil {
			t.Errorf("fn's ctx (%v) or the lease's Context (%v) done while leading", fctx.Err(), leader.Context().Err())
		}
		return nil
	})
	if err != nil {
		t.Errorf("Run whose fn returned nil: %v, want nil", err)
	}
	if n := terms.Load(); n != 1 {
		t.Errorf("%d terms, want 1", n)
	}
	noLeader(t, e, "after Run")
}

// TestElectionRunDoneDoesNotSpin: a fn that returns nil at once is one
// term: Run resigns and returns nil, however long its ctx has left. Before,
// Run resigned and campaigned again at once, thousands of terms a second.
func TestElectionRunDoneDoesNotSpin(t *testing.T) {
	e, _, _ := runElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var terms atomic.Int32
	done := runAsync(ctx, e, "a", func(context.Context, latchkit.Lease) error {
		terms.Add(1)
		return nil
	})
	err := await(t, "fn returns nil at once", done, 3*time.Second)
	if err != nil {
		t.Errorf("Run: %v, want nil (the work is done)", err)
	}
	if n := terms.Load(); n != 1 {
		t.Errorf("%d terms in Run, want exactly 1", n)
	}
	noLeader(t, e, "after Run")
}

// TestElectionRunReturnsFnError: a fn that fails while leading ends Run
// with its error (wrapped, errors.Is finds it) after one term, resigned.
func TestElectionRunReturnsFnError(t *testing.T) {
	e, _, _ := runElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	boom := errors.New("boom")
	var terms atomic.Int32
	err := await(t, "fn fails", runAsync(ctx, e, "a", func(context.Context, latchkit.Lease) error {
		terms.Add(1)
		return boom
	}), 3*time.Second)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"run"`) {
		t.Errorf("Run: %v, want boom wrapped with the election's name", err)
	}
	if n := terms.Load(); n != 1 {
		t.Errorf("%d terms, want 1", n)
	}
	noLeader(t, e, "after Run")
}

// TestElectionRunCauseWhenLost: when leadership is lost while fn runs (its
// lock key deleted behind its back, found by the next renewal), fn's ctx
// ends with a cause matching latchkit.ErrLeaseLost (not just
// context.Canceled); Run then campaigns again and the next term has a
// higher fence. When Run's ctx ends, the running term's ctx ends with Run's
// ctx's cause, and Run returns an error matching both ctx.Err() and that
// cause, after resigning.
func TestElectionRunCauseWhenLost(t *testing.T) {
	const ttl = 900 * time.Millisecond // renewals every 300 ms
	e, m, _ := runElection(t, primitives.WithTTL(ttl), primitives.WithPrefix("rl:"))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type term struct {
		fence int64
		cause error
	}
	terms := make(chan term, 10)
	done := runAsync(ctx, e, "a", func(fctx context.Context, leader latchkit.Lease) error {
		<-fctx.Done()
		terms <- term{leader.Fence(), context.Cause(fctx)}
		return fctx.Err()
	})
	if _, err := e.Leader(ctx); err != nil {
		// The first term may not have begun: wait for the seat.
		deadline := time.Now().Add(3 * time.Second)
		for ; err != nil && time.Now().Before(deadline); _, err = e.Leader(ctx) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	first, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("no leader: %v", err)
	}
	m.Del(keyspace.ElectionLayout.KeysOf("rl:", "run")[0])
	var lost term
	select {
	case lost = <-terms:
	case <-time.After(ttl + time.Second):
		t.Fatal("fn's ctx did not end after the lock key was deleted")
	}
	if lost.fence != first.Fence {
		t.Errorf("the lost term's fence %d, Leader said %d", lost.fence, first.Fence)
	}
	if !errors.Is(lost.cause, latchkit.ErrLeaseLost) {
		t.Errorf("cause of fn's ctx on loss: %v, want one matching ErrLeaseLost", lost.cause)
	}
	t.Logf("cause on loss: %v", lost.cause)

	// Run campaigns again: a second term, with a higher fence.
	var second primitives.LeaderInfo
	deadline := time.Now().Add(5 * time.Second)
	for second.Fence <= first.Fence && time.Now().Before(deadline) {
		second, _ = e.Leader(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	if second.Value != "a" || second.Fence <= first.Fence {
		t.Fatalf("after the loss: Leader %+v, want a again with a fence above %d", second, first.Fence)
	}

	shutdown := errors.New("shutting down")
	cancel(shutdown)
	err = await(t, "ctx cancelled", done, 3*time.Second)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, shutdown) {
		t.Errorf("Run after its ctx was cancelled: %v, want context.Canceled and its cause", err)
	}
	select {
	case tm := <-terms:
		if tm.fence != second.Fence || !errors.Is(tm.cause, shutdown) || errors.Is(tm.cause, latchkit.ErrLeaseLost) {
			t.Errorf("second term: fence %d cause %v; want fence %d, cause the shutdown", tm.fence, tm.cause, second.Fence)
		}
	default:
		t.Error("the second term's fn did not return before Run")
	}
	noLeader(t, e, "after Run")
}

// TestElectionRunCauseWhenTTLRunsOut: without auto-extend, leadership ends
// at the lease's TTL: fn's ctx ends with a cause matching ErrLeaseLost,
// and Run leads again (with a pause between terms): over a bounded time,
// the terms are bounded by the TTL and the pause.
func TestElectionRunCauseWhenTTLRunsOut(t *testing.T) {
	const ttl = 100 * time.Millisecond
	e, _, _ := runElection(t, primitives.WithTTL(ttl), primitives.WithAutoExtend(false))
	const span = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), span)
	defer cancel()
	var terms, lost atomic.Int32
	var firstCause atomic.Value
	done := runAsync(ctx, e, "a", func(fctx context.Context, _ latchkit.Lease) error {
		terms.Add(1)
		<-fctx.Done()
		if c := context.Cause(fctx); errors.Is(c, latchkit.ErrLeaseLost) {
			lost.Add(1)
			firstCause.CompareAndSwap(nil, fmt.Sprint(c))
		}
		return nil // a term that ended by loss campaigns again whatever fn returns
	})
	err := await(t, "deadline", done, span+3*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run: %v, want context.DeadlineExceeded", err)
	}
	n, l := terms.Load(), lost.Load()
	t.Logf("%d terms, %d lost, in %v with a %v TTL; first cause: %v", n, l, span, ttl, firstCause.Load())
	if l < 2 || n > l+1 {
		t.Errorf("%d terms, %d ended by a loss: want at least 2 losses, and every term but the last lost", n, l)
	}
	if max := int32(span / ttl); n > max {
		t.Errorf("%d terms in %v, want at most %d", n, span, max)
	}
}

// lostAtOnce is a lease already lost when granted: its Context is done
// with a cause matching ErrLeaseLost.
type lostAtOnce struct {
	latchkit.Lease
	ctx context.Context
}

func (l lostAtOnce) Context() context.Context { return l.ctx }
func (l lostAtOnce) Unwrap() latchkit.Lease   { return l.Lease }

// loseAtOnce is middleware whose every grant is lost at once; it counts
// the grants in n.
func loseAtOnce(n *atomic.Int32) latchkit.Middleware {
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			l, err := next(ctx, req)
			if err != nil {
				return l, err
			}
			n.Add(1)
			lctx, cancel := context.WithCancelCause(context.Background())
			cancel(fmt.Errorf("injected: %w", latchkit.ErrLeaseLost))
			return lostAtOnce{l, lctx}, nil
		}
	}
}

// TestElectionRunLossesDoNotSpin: leadership lost as soon as it is
// granted, term after term, is no term: fn is never called with a
// context already ended (issue 38, finding 7: Run called fn with an ended
// context, and two workers' fn ran within 4 ms of each other), and Run
// does not campaign in a tight loop: the pause between lost grants grows
// (the retry policy's back-off, reset only by a term that lasted its
// TTL), so 2 s hold a handful of grants, not thousands.
func TestElectionRunLossesDoNotSpin(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	var grants atomic.Int32
	e, _, _ := runElection(t, primitives.WithMiddleware(loseAtOnce(&grants)))
	const span = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), span)
	defer cancel()
	var terms atomic.Int32
	done := runAsync(ctx, e, "a", func(fctx context.Context, _ latchkit.Lease) error {
		terms.Add(1)
		t.Errorf("fn called with its context ended (%v) by a lease lost before the term began", context.Cause(fctx))
		return fctx.Err()
	})
	err := await(t, "deadline", done, span+3*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run: %v, want context.DeadlineExceeded", err)
	}
	n := grants.Load()
	t.Logf("%d grants lost at once in %v; fn called %d times", n, span, terms.Load())
	if n < 2 || n > 25 {
		t.Errorf("%d grants in %v, want between 2 (Run campaigns again after a loss) and 25 (it backs off)", n, span)
	}
	noLeader(t, e, "after Run")
}

// TestElectionRunEndsPromptlyWhileCampaigning: while another leads, Run
// waits in the queue; when its ctx ends it returns at once with ctx's
// error, fn never called, leaving the leader as it was and no campaigner
// behind (the leader's resignation empties the seat).
func TestElectionRunEndsPromptlyWhileCampaigning(t *testing.T) {
	e, _, b := runElection(t)
	other, err := primitives.NewElection(clienttest.For(t, b), "run")
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	lead, err := other.Campaign(bg, "other")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := runAsync(ctx, e, "a", func(context.Context, latchkit.Lease) error {
		t.Error("fn called while another leads")
		return nil
	})
	time.Sleep(200 * time.Millisecond) // Run queues
	start := time.Now()
	cancel()
	err = await(t, "ctx cancelled while campaigning", done, 2*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Run returned %v after its ctx ended", d)
	}
	if info, err := e.Leader(bg); err != nil || info.Value != "other" {
		t.Errorf("Leader = %+v, %v; want other", info, err)
	}
	if err := lead.Release(bg); err != nil {
		t.Fatal(err)
	}
	noLeader(t, e, "after the leader resigned")
}

// TestElectionRunFnResigns: fn may resign itself (leader.Release): its ctx
// ends then, with a cause that is not ErrLeaseLost (it was not lost), and
// when fn returns nil Run returns nil without campaigning again.
func TestElectionRunFnResigns(t *testing.T) {
	e, _, _ := runElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var terms atomic.Int32
	err := await(t, "fn resigns", runAsync(ctx, e, "a", func(fctx context.Context, leader latchkit.Lease) error {
		terms.Add(1)
		if err := leader.Release(fctx); err != nil {
			t.Errorf("Release in fn: %v", err)
		}
		select {
		case <-fctx.Done():
		case <-time.After(time.Second):
			t.Error("fn's ctx not done after fn resigned")
		}
		if c := context.Cause(fctx); errors.Is(c, latchkit.ErrLeaseLost) {
			t.Errorf("cause after resigning: %v, want one not matching ErrLeaseLost", c)
		}
		return nil
	}), 3*time.Second)
	if err != nil {
		t.Errorf("Run: %v, want nil", err)
	}
	if n := terms.Load(); n != 1 {
		t.Errorf("%d terms, want 1", n)
	}
	noLeader(t, e, "after Run")
}
