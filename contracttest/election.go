package contracttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// RunElection checks primitives.NewElection on the backend.
func RunElection(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"OneLeaderAtATime", testElectionExclusive},
		{"LeaderAndTryCampaign", testElectionLeader},
		{"ResignHandsOverAtOnce", testElectionHandOver},
		{"DeadLeaderReplacedWithinTTL", testElectionDeadLeader},
		{"ObserveEveryChange", testElectionObserve},
		{"ObserveRereadsAfterDrop", testElectionObserveDrop},
		{"Run", testElectionRun},
		{"BadInput", testElectionBadInput},
	})
}

func newElection(t testing.TB, b backend.Backend, name string, opts ...primitives.Option) primitives.Election {
	t.Helper()
	e, err := primitives.NewElection(clienttest.For(t, b), name, append([]primitives.Option{primitives.WithPrefix(prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// slowWait makes campaigners that only a message wakes in time: their
// retry policy sleeps 30 s, and their place in the queue lasts a minute.
var slowWait = []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second)), primitives.WithWaiterTimeout(time.Minute)}

// testElectionExclusive: 12 campaigners over 3 clients, each leading 4
// times: never two leaders at once (a gauge, and a counter incremented by
// a non-atomic read-modify-write that would lose updates), every fence
// above the one before it, and Leader naming the leader while it leads.
func testElectionExclusive(t *testing.T, h Harness) {
	const campaigners, terms = 12, 4
	clients := []backend.Backend{h.NewClient(t).Backend, h.NewClient(t).Backend, h.NewClient(t).Backend}
	ctx := ctxT(t, 2*time.Minute)
	counter := prefix(t) + "counter"
	var leaders gauge
	var mu sync.Mutex
	var lastFence int64
	var wg sync.WaitGroup
	for c := 0; c < campaigners; c++ {
		e := newElection(t, clients[c%len(clients)], "x")
		me := fmt.Sprintf("pod-%d", c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < terms; i++ {
				lead, err := e.Campaign(ctx, me)
				if err != nil {
					t.Error(err)
					return
				}
				if n := leaders.enter(); n > 1 {
					t.Errorf("%d leaders at once", n)
				}
				mu.Lock()
				if lead.Fence() <= lastFence {
					t.Errorf("fence %d after %d", lead.Fence(), lastFence)
				}
				lastFence = lead.Fence()
				mu.Unlock()
				if info, err := e.Leader(ctx); err != nil || info.Value != me || info.Fence != lead.Fence() {
					t.Errorf("Leader while %s leads with fence %d: %+v, %v", me, lead.Fence(), info, err)
				}
				if err := incr(ctx, clients[0], counter, 2*time.Millisecond); err != nil {
					t.Error(err)
				}
				leaders.leave()
				if err := lead.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := do(t, clients[0], "GET", counter); got != fmt.Sprint(campaigners*terms) {
		t.Errorf("counter %v after %d terms: updates were lost, two leaders overlapped", got, campaigners*terms)
	}
}

// testElectionLeader: Leader reports ErrNoLeader on an empty seat and the
// leader's value and fence otherwise; TryCampaign leads on a free seat and
// fails at once with ErrNotAcquired on a taken one, queueing nothing.
func testElectionLeader(t *testing.T, h Harness) {
	ctx := ctxT(t, 20*time.Second)
	b := h.NewClient(t).Backend
	e := newElection(t, b, "l")
	if _, err := e.Leader(ctx); !errors.Is(err, primitives.ErrNoLeader) {
		t.Fatalf("Leader of an empty seat: %v, want ErrNoLeader", err)
	}
	lead, err := e.TryCampaign(ctx, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Leader(ctx); err != nil || info != (primitives.LeaderInfo{Value: "pod-a", Fence: lead.Fence()}) {
		t.Errorf("Leader: %+v, %v; want pod-a with fence %d", info, err, lead.Fence())
	}
	other := newElection(t, h.NewClient(t).Backend, "l")
	start := time.Now()
	if l, err := other.TryCampaign(ctx, "pod-b"); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryCampaign on a taken seat: %v, %v", l, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("TryCampaign took %v", d)
	}
	if n := elQueued(t, b, prefix(t), "l"); n != 0 {
		t.Errorf("TryCampaign left %d queue entries", n)
	}
	if err := lead.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, primitives.ErrNoLeader) {
		t.Errorf("Leader after the only leader resigned: %v, want ErrNoLeader", err)
	}
	l2, err := other.TryCampaign(ctx, "pod-b")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= lead.Fence() {
		t.Errorf("fences %d then %d", lead.Fence(), l2.Fence())
	}
	l2.Release(ctx)
}

// elQueued counts the entries of an election's queue.
func elQueued(t testing.TB, b backend.Backend, p, name string) int64 {
	return do(t, b, "ZCARD", keyspace.ElectionLayout.KeysOf(p, name)[5]).(int64)
}

// testElectionHandOver: two campaigners wait behind a leader; when it
// resigns, the first of them leads at once (woken, not polled: their retry
// policy sleeps 30 s) and Leader shows it; then the second, in arrival
// order.
func testElectionHandOver(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	ob := h.NewClient(t).Backend
	e := newElection(t, h.NewClient(t).Backend, "h", slowWait...)
	lead, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan latchkit.Lease, 2)
	for i, v := range []string{"second", "third"} {
		w := newElection(t, h.NewClient(t).Backend, "h", slowWait...)
		go func() {
			l, err := w.Campaign(ctx, v)
			if err != nil {
				t.Error(err)
				l = nil
			}
			got <- l
		}()
		eventually(t, 5*time.Second, v+" is queued", func() bool { return elQueued(t, ob, prefix(t), "h") == int64(i+1) })
	}
	for _, want := range []string{"second", "third"} {
		start := time.Now()
		if err := lead.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-got:
			if l == nil {
				t.FailNow()
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s led %v after the resignation", want, d)
			}
			info, err := e.Leader(ctx)
			if err != nil || info.Value != want || info.Fence != l.Fence() || l.Fence() <= lead.Fence() {
				t.Errorf("Leader after the hand-over: %+v, %v; want %s with fence %d above %d", info, err, want, l.Fence(), lead.Fence())
			}
			lead = l
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not lead within 10 s of the resignation", want)
		}
	}
	lead.Release(ctx)
}

// testElectionDeadLeader: a leader whose process stops renewing (auto-extend
// off stands for a dead process) is replaced once its TTL runs out, by the
// server's clock, with a higher fence, and its lease's Context has ended by
// then.
func testElectionDeadLeader(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	dead := newElection(t, h.NewClient(t).Backend, "d", primitives.WithTTL(500*time.Millisecond), primitives.WithAutoExtend(false))
	began := time.Now()
	lead, err := dead.Campaign(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	next := newElection(t, h.NewClient(t).Backend, "d", primitives.WithTTL(5*time.Second), countAttempts(&attempts))
	got := make(chan latchkit.Lease, 1)
	go func() {
		l, err := next.Campaign(ctx, "next")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// The server's clock never runs ahead of this process's: a harness
	// that moves it (miniredis) moves it by 600 ms only once 600 ms have
	// passed here. Moved sooner, the server would see the leader dead
	// while its lease's deadline had not passed by the clock the lease
	// keeps, and seat the campaign on any early attempt (seen: a wake-up
	// 128 ms in, on its third attempt).
	eventually(t, 5*time.Second, "the campaign attempted twice", func() bool { return attempts.Load() >= 2 })
	time.Sleep(time.Until(began.Add(600 * time.Millisecond)))
	h.AdvanceClock(t, 600*time.Millisecond)
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if lead.Context().Err() == nil {
			// Which interleaving: granted on an attempt before the TTL ran
			// out by this process's clock (an early wake-up), or after it
			// (the lease's own timer had not run yet: a stall longer than
			// the drift allowance, 7 ms at this TTL).
			t.Errorf("a new leader was seated while the dead leader's Context was live: %v after the dead leader's Campaign began (TTL 500ms), on the campaign's attempt %d",
				time.Since(began).Round(time.Millisecond), attempts.Load())
		}
		if l.Fence() <= lead.Fence() {
			t.Errorf("fences %d then %d", lead.Fence(), l.Fence())
		}
		if info, err := next.Leader(ctx); err != nil || info.Value != "next" {
			t.Errorf("Leader: %+v, %v", info, err)
		}
		l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("no new leader 10 s after the leader's 500 ms TTL")
	}
}

// testElectionRun: two Runs share a name; the first leads and its function
// runs; when its context is cancelled, it resigns and the second's function
// runs at once (woken); a function returning an error while leading ends its
// Run with that error after resigning (primitives' election_run_test.go
// covers the rest of Run's contract: nil, losses, causes).
func testElectionRun(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	var running atomic.Int32
	var terms atomic.Int32
	started := make(chan string, 10)
	job := func(me string, ret error) func(context.Context, latchkit.Lease) error {
		return func(ctx context.Context, _ latchkit.Lease) error {
			if n := running.Add(1); n > 1 {
				t.Errorf("%d Run functions at once", n)
			}
			terms.Add(1)
			started <- me
			if ret == nil {
				<-ctx.Done()
			}
			running.Add(-1)
			return ret
		}
	}
	actx, cancelA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		aDone <- newElection(t, h.NewClient(t).Backend, "run", slowWait...).Run(actx, "a", job("a", nil))
	}()
	if who := <-started; who != "a" {
		t.Fatalf("%s started first", who)
	}
	boom := errors.New("boom")
	bDone := make(chan error, 1)
	go func() {
		bDone <- newElection(t, h.NewClient(t).Backend, "run", slowWait...).Run(ctx, "b", job("b", boom))
	}()
	eventually(t, 5*time.Second, "b is queued", func() bool { return elQueued(t, h.NewClient(t).Backend, prefix(t), "run") == 1 })
	cancelA()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its context was cancelled: %v", err)
	}
	select {
	case who := <-started:
		if who != "b" {
			t.Fatalf("%s started, want b", who)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b's function did not run within 5 s of a's resignation")
	}
	if err := <-bDone; !errors.Is(err, boom) {
		t.Errorf("Run whose function failed: %v, want boom", err)
	}
	if _, err := newElection(t, h.NewClient(t).Backend, "run").Leader(ctx); !errors.Is(err, primitives.ErrNoLeader) {
		t.Errorf("after both Runs ended: %v, want ErrNoLeader (b resigned)", err)
	}
}

// testElectionBadInput: bad constructor arguments and campaign values are
// refused with ErrInvalid and write nothing; a seat key of another type
// fails every call with ErrInvalid and stays as it was.
func testElectionBadInput(t *testing.T, h Harness) {
	ctx := ctxT(t, 20*time.Second)
	b := h.NewClient(t).Backend
	p := prefix(t)
	for _, c := range []struct {
		what string
		b    backend.Backend
		name string
	}{{"nil backend", nil, "e"}, {"empty name", b, ""}} {
		if e, err := primitives.NewElection(clienttest.For(t, c.b), c.name, primitives.WithPrefix(p)); !errors.Is(err, latchkit.ErrInvalid) || e != nil {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
	e := newElection(t, b, "e")
	keys := keyspace.ElectionLayout.KeysOf(p, "e")
	before := keysState(t, b, keys)
	for _, v := range []string{"", strings.Repeat("x", maxLeaderValue+1)} {
		for _, c := range []func(context.Context, string) (latchkit.Lease, error){e.Campaign, e.TryCampaign} {
			if l, err := c(ctx, v); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
				t.Errorf("a value of %d bytes: %v, want ErrInvalid", len(v), err)
			}
		}
	}
	if after := keysState(t, b, keys); after != before {
		t.Errorf("refused campaigns wrote keys:\n%s", after)
	}
	seat := keys[7]
	do(t, b, "SET", seat, "precious")
	before = keysState(t, b, keys)
	for _, c := range []func(context.Context, string) (latchkit.Lease, error){e.TryCampaign, e.Campaign} {
		if l, err := c(ctx, "v"); !errors.Is(err, latchkit.ErrInvalid) || l != nil {
			t.Errorf("seat key is a string: %v, want ErrInvalid", err)
		}
	}
	if _, err := e.Leader(ctx); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("Leader with the seat key a string: %v, want ErrInvalid", err)
	}
	if after := keysState(t, b, keys); after != before {
		t.Errorf("the keys changed:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// maxLeaderValue is the longest value a campaign may give (4096 bytes).
const maxLeaderValue = 4096
