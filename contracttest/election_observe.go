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
	"github.com/latchkit/latchkit/primitives"
)

// observed collects what an observer delivers.
type observed struct {
	mu  sync.Mutex
	got []primitives.LeaderInfo
}

func observe(ctx context.Context, e primitives.Election) *observed {
	o := &observed{}
	ch := e.Observe(ctx)
	go func() {
		for info := range ch {
			o.mu.Lock()
			o.got = append(o.got, info)
			o.mu.Unlock()
		}
	}()
	return o
}

func (o *observed) list() []primitives.LeaderInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]primitives.LeaderInfo(nil), o.got...)
}

func (o *observed) String() string {
	var parts []string
	for _, i := range o.list() {
		if i == (primitives.LeaderInfo{}) {
			parts = append(parts, "(empty)")
		} else {
			parts = append(parts, fmt.Sprintf("%s@%d", i.Value, i.Fence))
		}
	}
	return strings.Join(parts, " ")
}

// testElectionObserve: two observers on their own clients see the same
// changes, in order, each once: the empty seat first, then a, then b
// (handed over by a's resignation), then the empty seat (b resigns with
// nobody waiting), then c, then the empty seat again when c stops renewing
// and its TTL runs out (which publishes nothing).
func testElectionObserve(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	e := newElection(t, h.NewClient(t).Backend, "o")
	oc, cancel := context.WithCancel(ctx)
	obs := []*observed{observe(oc, newElection(t, h.NewClient(t).Backend, "o")), observe(oc, newElection(t, h.NewClient(t).Backend, "o"))}
	var want []primitives.LeaderInfo
	seen := func(what string) {
		t.Helper()
		for _, o := range obs {
			eventually(t, 10*time.Second, fmt.Sprintf("%s; observer saw %s", what, o), func() bool { return len(o.list()) >= len(want) })
		}
	}
	want = append(want, primitives.LeaderInfo{})
	seen("the empty seat first")
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, primitives.LeaderInfo{Value: "a", Fence: a.Fence()})
	seen("a leads")
	got := make(chan latchkit.Lease, 1)
	go func() {
		l, err := newElection(t, h.NewClient(t).Backend, "o").Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 5*time.Second, "b is queued", func() bool { return elQueued(t, h.NewClient(t).Backend, prefix(t), "o") == 1 })
	a.Release(ctx)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	want = append(want, primitives.LeaderInfo{Value: "b", Fence: b.Fence()})
	seen("b leads")
	b.Release(ctx)
	want = append(want, primitives.LeaderInfo{})
	seen("the seat is empty")
	c, err := newElection(t, h.NewClient(t).Backend, "o", primitives.WithTTL(400*time.Millisecond), primitives.WithAutoExtend(false)).Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, primitives.LeaderInfo{Value: "c", Fence: c.Fence()})
	seen("c leads")
	advance(t, h, 500*time.Millisecond)
	want = append(want, primitives.LeaderInfo{})
	seen("c's TTL ran out")
	time.Sleep(100 * time.Millisecond)
	cancel()
	for i, o := range obs {
		if got := o.list(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("observer %d saw %s, want %v", i, o, want)
		}
	}
}

// testElectionObserveDrop: an observer's subscription drops and cannot be
// re-established for a while (its backend refuses to subscribe); meanwhile
// the leader changes, and every message about it is lost to the observer.
// It must still report the current leader, never stay on the stale one.
func testElectionObserveDrop(t *testing.T, h Harness) {
	ctx := ctxT(t, 30*time.Second)
	e := newElection(t, h.NewClient(t).Backend, "r")
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	deaf := &deafBackend{Backend: h.NewClient(t).Backend}
	o := observe(ctx, newElection(t, deaf, "r"))
	eventually(t, 10*time.Second, "the observer sees a", func() bool { return len(o.list()) == 1 })
	deaf.refuse.Store(true)
	if !h.KillSubscribers(t) {
		t.Skip("the server cannot drop subscribers")
	}
	a.Release(ctx)
	b, err := newElection(t, h.NewClient(t).Backend, "r").Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	time.Sleep(200 * time.Millisecond)
	deaf.refuse.Store(false)
	// Well before a's seat would have run out (10 s), which makes any observer
	// read again.
	eventually(t, 3*time.Second, "the observer reports b after its subscription dropped; it saw "+o.String(), func() bool {
		l := o.list()
		return l[len(l)-1] == primitives.LeaderInfo{Value: "b", Fence: b.Fence()}
	})
}

// deafBackend refuses to open subscriptions while refuse is set: a
// subscription that dropped stays down.
type deafBackend struct {
	backend.Backend
	refuse atomic.Bool
}

func (d *deafBackend) Cluster() bool { return backend.IsCluster(d.Backend) }

func (d *deafBackend) Subscribe(ctx context.Context, hd backend.Handler) (backend.Subscription, error) {
	if d.refuse.Load() {
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: cannot subscribe")}
	}
	return d.Backend.Subscribe(ctx, hd)
}
