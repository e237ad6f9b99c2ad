package contracttest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// RunHandOver checks the Mutex's hand-over: a waiting Lock queues, and a
// release gives the lock straight to the oldest live waiter and wakes that
// waiter alone.
func RunHandOver(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"FIFOAcrossClients", func(t *testing.T, h Harness) { testHandOverFIFO(t, h, plainMutex) }},
		{"FairMutexFIFOAcrossClients", func(t *testing.T, h Harness) { testHandOverFIFO(t, h, fairMutex) }},
		{"WakesOnlyTheNewHolder", func(t *testing.T, h Harness) { testHandOverWakesOne(t, h, plainMutex) }},
		{"FairMutexWakesOnlyTheNewHolder", func(t *testing.T, h Harness) { testHandOverWakesOne(t, h, fairMutex) }},
		{"GaveUpWaiterLeavesTheQueue", testHandOverWithdraw},
		{"DeadWaitersAreSkipped", testHandOverDeadWaiters},
		{"UnconfirmedHandOverFrees", testHandOverUnconfirmed},
		{"HandedLeaseIsRenewed", func(t *testing.T, h Harness) { testHandOverRenewed(t, h, plainMutex) }},
		{"FairMutexHandedLeaseIsRenewed", func(t *testing.T, h Harness) { testHandOverRenewed(t, h, fairMutex) }},
		{"StaleHandOverMessageGrantsNothing", func(t *testing.T, h Harness) { testHandOverStale(t, h, plainMutex) }},
		{"FairMutexStaleHandOverMessageGrantsNothing", func(t *testing.T, h Harness) { testHandOverStale(t, h, fairMutex) }},
	})
}

// testHandOverRenewed: a waiter granted by a hand-over's message
// (no attempt to confirm it) holds the lock for 4 s, with a 10 s TTL and a
// 1.5 s waiter timeout: the server holds a handed lock for the hand-over's
// time only (the shorter of the two, 1.5 s), so the waiter's renewer must
// extend it well before its first renewal would be due by the TTL (3.3 s),
// halfway to the hand-over's deadline. Its Context stays live, a
// contender's TryLock is refused throughout, and its fence is above the
// holder's.
func testHandOverRenewed(t *testing.T, h Harness, k handOverKind) {
	ctx := ctxT(t, 30*time.Second)
	p := prefix(t)
	var attempts atomic.Int64
	opts := []primitives.Option{primitives.WithPrefix(p), primitives.WithTTL(10 * time.Second), primitives.WithWaiterTimeout(1500 * time.Millisecond)}
	holder, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "r", opts...)
	first, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "r", append(opts, countAttempts(&attempts))...)
	got := lockAsync(ctx, waiter)
	inspect := h.NewClient(t).Backend
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return k.queued(t, inspect, p, "r") == 1 })
	time.Sleep(100 * time.Millisecond) // its subscription's attempt
	before := attempts.Load()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		t.Fatalf("the waiter's Lock: %v", g.err)
	}
	l := g.l
	defer l.Release(ctx)
	if n := attempts.Load() - before; n != 0 {
		t.Logf("the waiter confirmed the hand-over with %d attempts (its process ran late?): the renewal under test was not exercised", n)
	}
	if l.Fence() <= first.Fence() {
		t.Errorf("fence %d after the holder's %d", l.Fence(), first.Fence())
	}
	contender, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "r", opts...)
	// Past the waiter timeout (1.5 s) that a hand-over's grant lasts until
	// its holder renews it: once in the fast lane, more in the long.
	for end := time.Now().Add(lane.Pick(2500*time.Millisecond, 4*time.Second)); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the handed lease was lost: %v", context.Cause(l.Context()))
		}
		if c, err := contender.TryLock(ctx); err == nil {
			c.Release(ctx)
			t.Fatal("a contender was granted the lock the hand-over gave the waiter")
		}
	}
}

// testHandOverStale: a hand-over message whose fence is not above the
// counter the waiter's last attempt saw (a message that came late, from a
// hand-over the waiter's attempts already found or outlived; forged here
// on the waiter's inbox) grants nothing: the waiter keeps waiting, and is
// granted by the holder's release.
func testHandOverStale(t *testing.T, h Harness, k handOverKind) {
	ctx := ctxT(t, 30*time.Second)
	p := prefix(t)
	opts := []primitives.Option{primitives.WithPrefix(p), primitives.WithWaiterTimeout(time.Minute)}
	holder, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "s", opts...)
	first, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "s", opts...)
	got := lockAsync(ctx, waiter)
	inspect := h.NewClient(t).Backend
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return k.queued(t, inspect, p, "s") == 1 })
	time.Sleep(100 * time.Millisecond) // its subscription's attempt
	token, box, fence := k.waiter(t, inspect, p, "s")
	// A hand-over names its waiter by the first 16 hex digits of its
	// token's SHA-1 (never the token).
	sum := sha1.Sum([]byte(token))
	do(t, inspect, "PUBLISH", box, pubsub.Target(hex.EncodeToString(sum[:8]))+" "+fence+" 60000")
	select {
	case g := <-got:
		if g.err != nil {
			t.Fatalf("the waiter's Lock: %v", g.err)
		}
		t.Fatalf("a stale hand-over message (fence %s, the last granted) granted the lock (fence %d) while its holder held it", fence, g.l.Fence())
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, ctx, got, "the holder's release did not reach the waiter")
}

// queued returns how many waiters the queue of mutex name holds.
func queued(t testing.TB, b backend.Backend, p, name string) int64 {
	t.Helper()
	n, _ := do(t, b, "ZCARD", keyOf(p, name)+":q").(int64)
	return n
}

// handOverKind is a primitive that hands itself over: how to make one, and
// how many waiters (not holders) its queue holds.
type handOverKind struct {
	name   string
	new    func(c *primitives.Client, name string, opts ...primitives.Option) (primitives.Mutex, error)
	queued func(t testing.TB, b backend.Backend, p, name string) int64
	// waiter returns the token of the one waiter queued, the inbox its
	// hand-over is published on and the last fence granted (a Mutex's
	// holder's, the highest a FairMutex's holders hold).
	waiter func(t testing.TB, b backend.Backend, p, name string) (token, inbox, fence string)
}

var (
	plainMutex = handOverKind{"mutex", primitives.NewMutex, queued, func(t testing.TB, b backend.Backend, p, name string) (string, string, string) {
		t.Helper()
		entries, _ := do(t, b, "ZRANGE", keyOf(p, name)+":q", "0", "0").([]backend.Value)
		if len(entries) != 1 {
			t.Fatalf("queue: %v", entries)
		}
		token, box, _ := strings.Cut(entries[0].(string), " ")
		lock, _ := do(t, b, "GET", keyOf(p, name)).(string) // "token fence"
		_, fence, _ := strings.Cut(lock, " ")
		return token, box, fence
	}}
	fairMutex = handOverKind{"fair mutex", primitives.NewFairMutex, func(t testing.TB, b backend.Backend, p, name string) int64 {
		t.Helper()
		q, _ := do(t, b, "ZCARD", keyOf(p, name)+":fair:queue").(int64)
		held, _ := do(t, b, "HLEN", keyOf(p, name)+":fair:holders").(int64)
		return q - held
	}, func(t testing.TB, b backend.Backend, p, name string) (string, string, string) {
		t.Helper()
		base := keyOf(p, name) + ":fair"
		entries, _ := do(t, b, "ZRANGE", base+":queue", "0", "-1").([]backend.Value)
		var waiting []string
		for _, e := range entries {
			if do(t, b, "HEXISTS", base+":holders", e.(string)) == int64(0) {
				waiting = append(waiting, e.(string))
			}
		}
		if len(waiting) != 1 {
			t.Fatalf("queue %v: want one waiter", entries)
		}
		box, _ := do(t, b, "HGET", base+":box", waiting[0]).(string)
		fences, _ := do(t, b, "HVALS", base+":holders").([]backend.Value)
		var fence int64
		for _, f := range fences {
			n, _ := strconv.ParseInt(f.(string), 10, 64)
			fence = max(fence, n)
		}
		return waiting[0], box, strconv.FormatInt(fence, 10)
	}}
)

// testHandOverFIFO: a holder and 4 waiters, each its own client (as
// separate processes), the waiters queued one after the other. Releasing
// hands the lock to the waiters in arrival order, and the holder, locking
// again at once after its release, comes last: no self-reacquire. Fences
// rise with every grant.
func testHandOverFIFO(t *testing.T, h Harness, k handOverKind) {
	const waiters = 4
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	newM := func() primitives.Mutex {
		m, err := k.new(clienttest.For(t, h.NewClient(t).Backend), "f", primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	inspect := h.NewClient(t).Backend
	holder := newM()
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var fences []int64
	grant := func(who int, l latchkit.Lease) {
		mu.Lock()
		order = append(order, who)
		fences = append(fences, l.Fence())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	for i := range waiters {
		m := newM()
		wg.Go(func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			grant(i, l)
		})
		eventually(t, 10*time.Second, "the waiter queued", func() bool { return k.queued(t, inspect, p, "f") == int64(i+1) })
	}
	// Each waiter's entry names its own client's inbox (under the release
	// channel), where a hand-over to it is published: one connection hears
	// it, not every client subscribed to the name.
	var boxes []string
	if k.name == "mutex" {
		entries, _ := do(t, inspect, "ZRANGE", keyOf(p, "f")+":q", "0", "-1").([]backend.Value)
		for _, e := range entries {
			_, box, _ := strings.Cut(e.(string), " ")
			boxes = append(boxes, box)
		}
	} else {
		entries, _ := do(t, inspect, "HVALS", keyOf(p, "f")+":fair:box").([]backend.Value)
		for _, e := range entries {
			boxes = append(boxes, e.(string))
		}
	}
	inboxes := map[string]bool{}
	for _, box := range boxes {
		if !strings.Contains(box, ":rel:to:") {
			t.Fatalf("a waiter's inbox %q is not under its release channel", box)
		}
		inboxes[box] = true
	}
	if len(inboxes) != waiters {
		t.Fatalf("%d distinct inboxes for %d waiting clients", len(inboxes), waiters)
	}
	first := l.Fence()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grant(waiters, again)
	wg.Wait()
	if want := []int{0, 1, 2, 3, waiters}; !slices.Equal(order, want) {
		t.Fatalf("grant order %v, want %v: waiters in arrival order, the releasing holder after them", order, want)
	}
	prev := first
	for i, f := range fences {
		if f <= prev {
			t.Fatalf("fence %d of grant %d is not above %d", f, i, prev)
		}
		prev = f
	}
	if n := k.queued(t, inspect, p, "f"); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
}

// testHandOverWakesOne: 6 waiters in 6 clients queue behind a holder. A
// release wakes the new holder alone, not every waiting client: a Mutex's
// new holder holds on the release's message alone (a hand-over in two
// requests, the waiter's queueing attempt and the release: no attempt
// more). The waiter timeout is long, so no waiter re-attempts on its own
// timer during the test, and so is the retry policy's delay (slowWait): a
// waiter whose subscription was not confirmed within the default
// policy's first delay (50 ms at least) polled at that policy's pace
// until it was, and a poll landed after the waiters had seemed settled
// (seen once in a loaded fast lane: "release 1 cost 1 attempts"). With a
// 30 s delay the waiter waits for its subscription instead, up to its
// hint, and never polls.
func testHandOverWakesOne(t *testing.T, h Harness, k handOverKind) {
	const waiters = 6
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	var attempts atomic.Int64
	opts := append([]primitives.Option{primitives.WithPrefix(p), countAttempts(&attempts), primitives.WithTTL(time.Minute)}, slowWait...)
	holder, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "w", opts...)
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan latchkit.Lease, waiters)
	var each [waiters]atomic.Int64 // each waiter's attempts
	for i := range waiters {
		m, _ := k.new(clienttest.For(t, h.NewClient(t).Backend), "w", append(opts[:len(opts):len(opts)], countAttempts(&each[i]))...)
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				granted <- nil
				return
			}
			granted <- l
		}()
	}
	inspect := h.NewClient(t).Backend
	eventually(t, 10*time.Second, "every waiter queued", func() bool { return k.queued(t, inspect, p, "w") == waiters })
	// A queued waiter makes its second attempt once subscribed; let those
	// settle: every waiter has made its own second attempt (a count of
	// all the waiters' attempts could reach 2 per waiter while one waiter,
	// slow to subscribe, had made one: its second then came after a
	// release, seen once on a loaded machine), and none came for 50 ms.
	var before int64
	eventually(t, 10*time.Second, "the waiters' attempts settled", func() bool {
		n := attempts.Load()
		settled := n == before
		for i := range each {
			settled = settled && each[i].Load() >= 2
		}
		before = n
		time.Sleep(50 * time.Millisecond)
		return settled
	})
	for i := range waiters {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l = <-granted
		if l == nil {
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond) // room for stray wake-ups to show
		if got := attempts.Load() - before; got != 0 {
			t.Fatalf("release %d cost %d attempts, want none: only the new holder may wake, and it holds without confirming", i+1, got)
		}
		before = attempts.Load()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
