package primitives_test

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/primitives"
)

// closeTestRedis starts a miniredis and returns it with a go-redis client
// of its own (a process of its own: Close of one Client leaves the other's
// connections alone).
func closeTestRedis(t *testing.T) (*miniredis.Miniredis, func() *primitives.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	return m, func() *primitives.Client {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		c, err := primitives.NewClient(goredis.New(rdb))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
}

func closeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestCloseWithdrawsQueuedCampaign: a process that closes its Client while
// its Campaign is queued leaves the queue, so the leader's resignation
// seats the next live campaigner at once, not the closed one (before
// Close existed, the resignation handed the seat to the gone campaigner,
// and it stayed empty until the hand-over timed out).
func TestCloseWithdrawsQueuedCampaign(t *testing.T) {
	m, newClient := closeTestRedis(t)
	_ = m
	ctx := closeCtx(t)
	a, b, c := newClient(), newClient(), newClient()
	opts := []primitives.Option{primitives.WithTTL(10 * time.Second), primitives.WithWaiterTimeout(10 * time.Second)}
	ea, _ := primitives.NewElection(a, "sched", opts...)
	eb, _ := primitives.NewElection(b, "sched", opts...)
	ec, _ := primitives.NewElection(c, "sched", opts...)
	lead, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		_, err := eb.Campaign(ctx, "b")
		bDone <- err
	}()
	waitQueued(t, m, 1)
	cGot := make(chan latchkit.Lease, 1)
	go func() {
		l, err := ec.Campaign(ctx, "c")
		if err != nil {
			t.Error(err)
		}
		cGot <- l
	}()
	waitQueued(t, m, 2)

	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-bDone; !errors.Is(err, latchkit.ErrClosed) {
		t.Fatalf("queued Campaign on a closed client returned %v, want an error matching ErrClosed", err)
	}
	began := time.Now()
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-cGot:
		if l == nil {
			t.Fatal("no lease")
		}
		info, err := ea.Leader(ctx)
		if err != nil || info.Value != "c" {
			t.Fatalf("leader after the resignation: %+v, %v; want c", info, err)
		}
		_ = l.Release(ctx)
	case <-time.After(2 * time.Second):
		info, err := ea.Leader(ctx)
		t.Fatalf("the next live campaigner was not seated within 2s of the resignation (%v); the seat: %+v, %v", time.Since(began), info, err)
	}
}

// waitQueued waits until the election's queue of campaigners holds n.
func waitQueued(t *testing.T, m *miniredis.Miniredis, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, k := range m.Keys() {
			if strings.HasSuffix(k, ":el:q") {
				if members, _ := m.ZMembers(k); len(members) == n {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the queue never held %d campaigners; keys %v", n, m.Keys())
}

// TestCloseReleasesWhatItHolds: Close releases every lease its primitives
// hold (another process takes each at once), ends their Contexts with a
// cause matching ErrClosed, and a later Release says so.
func TestCloseReleasesWhatItHolds(t *testing.T) {
	m, newClient := closeTestRedis(t)
	ctx := closeCtx(t)
	a, other := newClient(), newClient()
	type kind struct {
		name string
		try  func(c *primitives.Client) (latchkit.Lease, error)
	}
	kinds := []kind{
		{"Mutex", func(c *primitives.Client) (latchkit.Lease, error) {
			mu, _ := primitives.NewMutex(c, "mu")
			return mu.TryLock(ctx)
		}},
		{"FairMutex", func(c *primitives.Client) (latchkit.Lease, error) {
			mu, _ := primitives.NewFairMutex(c, "fm")
			return mu.TryLock(ctx)
		}},
		{"Semaphore", func(c *primitives.Client) (latchkit.Lease, error) {
			s, _ := primitives.NewSemaphore(c, "sem", 1)
			return s.TryAcquire(ctx)
		}},
		{"FairSemaphore", func(c *primitives.Client) (latchkit.Lease, error) {
			s, _ := primitives.NewFairSemaphore(c, "fs", 1)
			return s.TryAcquire(ctx)
		}},
		{"RWLock", func(c *primitives.Client) (latchkit.Lease, error) {
			rw, _ := primitives.NewRWLock(c, "rw")
			return rw.TryLock(ctx)
		}},
		{"MultiLock", func(c *primitives.Client) (latchkit.Lease, error) {
			mu, _ := primitives.NewMultiLock(c, []string{"x", "y"})
			return mu.TryLock(ctx)
		}},
		{"Redlock", func(c *primitives.Client) (latchkit.Lease, error) {
			mu, _ := primitives.NewRedlock([]*primitives.Client{c}, "rl")
			return mu.TryLock(ctx)
		}},
		{"ReentrantMutex", func(c *primitives.Client) (latchkit.Lease, error) {
			mu, _ := primitives.NewReentrantMutex(c, "re")
			return mu.TryLock(primitives.WithOwner(ctx, "job-1"))
		}},
		{"Election", func(c *primitives.Client) (latchkit.Lease, error) {
			e, _ := primitives.NewElection(c, "el")
			return e.TryCampaign(ctx, "me")
		}},
	}
	held := map[string]latchkit.Lease{}
	for _, k := range kinds {
		l, err := k.try(a)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		held[k.name] = l
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, k := range kinds {
		l := held[k.name]
		select {
		case <-l.Context().Done():
		default:
			t.Errorf("%s: the lease's Context is not done after Close", k.name)
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, latchkit.ErrClosed) {
			t.Errorf("%s: the lease's Context ended with %v, want a cause matching ErrClosed", k.name, cause)
		}
		if err := l.Release(ctx); !errors.Is(err, latchkit.ErrClosed) {
			t.Errorf("%s: Release after Close returned %v, want an error matching ErrClosed", k.name, err)
		}
		got, err := k.try(other)
		if err != nil {
			t.Errorf("%s: another client could not take it after Close: %v", k.name, err)
			continue
		}
		_ = got.Release(ctx)
	}
	if t.Failed() {
		keys := m.Keys()
		sort.Strings(keys)
		t.Logf("keys: %v", keys)
	}
}

// TestCallsAfterCloseReturnErrClosed: after Close, every call of every
// primitive made from the Client, and every constructor given it, returns
// an error matching ErrClosed, and writes nothing.
func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	m, newClient := closeTestRedis(t)
	ctx := closeCtx(t)
	c := newClient()
	mu, _ := primitives.NewMutex(c, "mu")
	sem, _ := primitives.NewSemaphore(c, "sem", 2)
	fair, _ := primitives.NewFairSemaphore(c, "fair", 2)
	rw, _ := primitives.NewRWLock(c, "rw")
	latch, _ := primitives.NewLatch(c, "latch")
	el, _ := primitives.NewElection(c, "el")
	rl, _ := primitives.NewRedlock([]*primitives.Client{c}, "rl")
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := keyspace.WithoutClientRecords(m.Keys())
	lease := func(_ latchkit.Lease, err error) error { return err }
	calls := map[string]error{
		"Mutex.Lock":              lease(mu.Lock(ctx)),
		"Mutex.TryLock":           lease(mu.TryLock(ctx)),
		"Redlock.Lock":            lease(rl.Lock(ctx)),
		"Semaphore.Acquire":       lease(sem.Acquire(ctx)),
		"Semaphore.TryAcquireN":   lease(sem.TryAcquireN(ctx, 2)),
		"Semaphore.SetLimit":      sem.SetLimit(ctx, 3),
		"FairSemaphore.AcquireN":  lease(fair.AcquireN(ctx, 2)),
		"FairSemaphore.SetLimit":  fair.SetLimit(ctx, 3),
		"RWLock.RLock":            lease(rw.RLock(ctx)),
		"RWLock.Lock":             lease(rw.Lock(ctx)),
		"Latch.CountDown":         latch.CountDown(ctx),
		"Latch.Wait":              latch.Wait(ctx),
		"Election.Campaign":       lease(el.Campaign(ctx, "v")),
		"Election.TryCampaign":    lease(el.TryCampaign(ctx, "v")),
		"Election.Run":            el.Run(ctx, "v", func(context.Context, latchkit.Lease) error { return nil }),
		"Election.Leader":         func() error { _, err := el.Leader(ctx); return err }(),
		"Latch.Count":             func() error { _, err := latch.Count(ctx); return err }(),
		"Latch.TrySetCount":       func() error { _, err := latch.TrySetCount(ctx, 1); return err }(),
		"NewMutex":                func() error { _, err := primitives.NewMutex(c, "x"); return err }(),
		"NewRedlock":              func() error { _, err := primitives.NewRedlock([]*primitives.Client{c}, "x"); return err }(),
		"Client.Close (again)":    nil,
		"NewLatch":                func() error { _, err := primitives.NewLatch(c, "x"); return err }(),
		"NewElection":             func() error { _, err := primitives.NewElection(c, "x"); return err }(),
		"NewSemaphore":            func() error { _, err := primitives.NewSemaphore(c, "x", 1); return err }(),
		"NewFairSemaphore":        func() error { _, err := primitives.NewFairSemaphore(c, "x", 1); return err }(),
		"NewRWLock":               func() error { _, err := primitives.NewRWLock(c, "x"); return err }(),
		"NewMultiLock":            func() error { _, err := primitives.NewMultiLock(c, []string{"x"}); return err }(),
		"NewFairMutex/ReentrantM": func() error { _, err := primitives.NewReentrantMutex(c, "x"); return err }(),
	}
	delete(calls, "Client.Close (again)")
	for name, err := range calls {
		if !errors.Is(err, latchkit.ErrClosed) {
			t.Errorf("%s after Close: %v, want an error matching ErrClosed", name, err)
		}
	}
	if _, ok := <-el.Observe(ctx); ok {
		t.Error("Observe after Close sent a value; want its channel closed")
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if after := keyspace.WithoutClientRecords(m.Keys()); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("calls after Close changed the keys: %v, then %v", before, after)
	}
}

// TestCloseEndsRunAndObserve: Close ends an Election's Run (its fn's
// context says why, and the next campaigner is seated at once) and its
// Observe (the channel closes).
func TestCloseEndsRunAndObserve(t *testing.T) {
	_, newClient := closeTestRedis(t)
	ctx := closeCtx(t)
	a, other := newClient(), newClient()
	el, _ := primitives.NewElection(a, "run", primitives.WithWaiterTimeout(10*time.Second))
	obs := el.Observe(context.Background())
	running := make(chan struct{})
	cause := make(chan error, 1)
	runErr := make(chan error, 1)
	go func() {
		runErr <- el.Run(context.Background(), "a", func(ctx context.Context, _ latchkit.Lease) error {
			close(running)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	<-running
	next, _ := primitives.NewElection(other, "run", primitives.WithWaiterTimeout(10*time.Second))
	seated := make(chan latchkit.Lease, 1)
	go func() {
		l, err := next.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		seated <- l
	}()
	time.Sleep(50 * time.Millisecond) // b queues
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cause; !errors.Is(err, latchkit.ErrClosed) {
		t.Errorf("fn's context ended with cause %v, want one matching ErrClosed", err)
	}
	if err := <-runErr; !errors.Is(err, latchkit.ErrClosed) {
		t.Errorf("Run returned %v, want an error matching ErrClosed", err)
	}
	select {
	case l := <-seated:
		if l != nil {
			_ = l.Release(ctx)
		}
	case <-time.After(2 * time.Second):
		t.Error("the next campaigner was not seated within 2s of Close")
	}
	for range obs { // drains, then must close
	}
}

// TestCloseLeavesNoGoroutine: after a Client has renewed leases, waited
// on pub/sub, observed an election and given back a cut-short
// acquisition, Close returns with none of its goroutines left.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	m, newClient := closeTestRedis(t)
	ctx := closeCtx(t)
	holder, c := newClient(), newClient()
	// The holder of "busy", another Client: its goroutines (its record's,
	// from its first acquisition on) are not c's.
	hm, _ := primitives.NewMutex(holder, "busy", primitives.WithAutoExtend(false))
	hl, err := hm.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Release(ctx)
	ignore := goleak.IgnoreCurrent() // NewClient starts nothing
	before := goroutineIDs()

	// Renewals: a lease renewed a few times.
	mu, _ := primitives.NewMutex(c, "renewed", primitives.WithTTL(60*time.Millisecond))
	l, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := l.Context().Err(); err != nil {
		t.Fatalf("renewed lease ended: %v", context.Cause(l.Context()))
	}
	// A waiter on pub/sub, left queued.
	wm, _ := primitives.NewMutex(c, "busy")
	waiters := make(chan struct{}, 2)
	go func() { _, _ = wm.Lock(context.Background()); waiters <- struct{}{} }()
	// An observer, and a latch waiter.
	el, _ := primitives.NewElection(c, "el")
	_ = el.Observe(context.Background())
	lt, _ := primitives.NewLatch(c, "gate")
	if _, err := lt.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	go func() { _ = lt.Wait(context.Background()); waiters <- struct{}{} }()
	time.Sleep(50 * time.Millisecond)
	_ = m

	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-waiters // both calls returned before Close did: their goroutines end now
	<-waiters
	// Close waited for its goroutines: none may be left the moment it
	// returned (goleak, below, retries for a while, which would pass
	// goroutines that merely end soon after).
	if left := latchkitGoroutines(before); len(left) > 0 {
		t.Fatalf("latchkit goroutines left when Close returned:\n%s", strings.Join(left, "\n\n"))
	}
	// The embedded server's goroutines serve the go-redis pool's
	// connections, which are the application's, not the Client's.
	server := goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer")
	reader := goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2")
	if err := goleak.Find(ignore, server, reader); err != nil {
		t.Fatalf("goroutines left after Close returned: %v", err)
	}
}

// goroutineIDs returns the header line ("goroutine N [...") of every
// goroutine, by its number.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range stacks() {
		ids[strings.Fields(g)[1]] = true
	}
	return ids
}

func stacks() []string {
	buf := make([]byte, 1<<20)
	return strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
}

// latchkitGoroutines returns the stacks of the goroutines running
// latchkit code, other than the calling test's and those in before.
func latchkitGoroutines(before map[string]bool) []string {
	var left []string
	for _, g := range stacks() {
		if !before[strings.Fields(g)[1]] && strings.Contains(g, "github.com/latchkit/latchkit/") && !strings.Contains(g, "primitives_test.") {
			left = append(left, g)
		}
	}
	return left
}
