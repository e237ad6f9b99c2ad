package primitives

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/adapterkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// Lost means told, on time, whatever a call in flight does: these tests put
// a hung node beside healthy ones and check every lease's Context against
// its own deadline.

// hangs passes calls to the backend it wraps, except calls on keys under a
// hung prefix: they block until their context ends (a node stopped by
// SIGSTOP), or, with deaf set, for as long as the node hangs whatever the
// context says (a driver that ignores contexts). A batch with any such
// call blocks as a whole, as a pipeline to a Cluster waits for every node.
type hangs struct {
	backend.Backend
	deaf bool

	mu   sync.Mutex
	hung []string      // key prefixes whose node hangs
	cont chan struct{} // closed when the node continues

	inflight atomic.Int64 // calls let through and not yet answered
}

// settle waits, for up to d, until no call let through before the node
// hung is still in flight: from then on, nothing of this client reaches
// the server until resume. It reports whether that happened.
func (h *hangs) settle(d time.Duration) bool {
	for end := time.Now().Add(d); h.inflight.Load() > 0; {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func newHangs(b backend.Backend) *hangs { return &hangs{Backend: b, cont: make(chan struct{})} }

func (h *hangs) stop(prefix string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hung = append(h.hung, prefix)
}

func (h *hangs) resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hung = nil
	close(h.cont)
	h.cont = make(chan struct{})
}

// block waits while the node of keys hangs.
func (h *hangs) block(ctx context.Context, keys []string) error {
	h.mu.Lock()
	hung, cont := false, h.cont
	for _, p := range h.hung {
		if len(keys) > 0 && strings.HasPrefix(keys[0], p) {
			hung = true
		}
	}
	h.mu.Unlock()
	if !hung {
		return nil
	}
	if h.deaf {
		<-cont
		return nil
	}
	select {
	case <-cont:
		return nil
	case <-ctx.Done():
		return &backend.Error{Class: ctx.Err(), Cause: errors.New("i/o timeout")}
	}
}

func (h *hangs) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if err := h.block(ctx, keys); err != nil {
		return nil, err
	}
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	return h.Backend.Eval(ctx, s, keys, args)
}

func (h *hangs) EvalBatch(ctx context.Context, calls []backend.Call) {
	for _, c := range calls {
		if err := h.block(ctx, c.Keys); err != nil {
			adapterkit.FailCalls(calls, err)
			return
		}
	}
	h.inflight.Add(1)
	defer h.inflight.Add(-1)
	h.Backend.(backend.Batcher).EvalBatch(ctx, calls)
}

// watch records when a lease's Context ended, and checks it against the
// lease's deadline by the client's clock.
type watch struct {
	l        latchkit.Lease
	granted  time.Time // Lock returned; the deadline is at most start + ttl - drift
	ttl      time.Duration
	mu       sync.Mutex
	ended    time.Time
	stopWait func() bool
}

func watchLease(l latchkit.Lease, granted time.Time, ttl time.Duration) *watch {
	w := &watch{l: l, granted: granted, ttl: ttl}
	w.stopWait = context.AfterFunc(l.Context(), func() {
		w.mu.Lock()
		w.ended = time.Now()
		w.mu.Unlock()
	})
	return w
}

func (w *watch) end() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended
}

// timerSlack is how late a lease's Context may end after its deadline: the
// time the Go scheduler takes to run a timer that has fired.
const timerSlack = 50 * time.Millisecond

// TestRenewHungNodeDelaysOnlyItsLeases: four long leases on node A, whose
// renewals hang once A stops, and a short lease L on the healthy node B
// taken after that. L must be renewed (its Context live, its key held) for
// several of its TTLs; the leases on A must be told lost by their own
// deadlines. (Before: the renewer blocked while 4 chunks hung, and L was
// lost although its node answered.)
func TestRenewHungNodeDelaysOnlyItsLeases(t *testing.T) {
	m, b := newMiniBackend(t)
	hb := newHangs(b)
	t.Cleanup(hb.resume)
	const long, short = 1500 * time.Millisecond, 400 * time.Millisecond
	var onA []*watch
	for _, name := range []string{"a1", "a2", "a3", "a4"} {
		mu, _ := NewMutex(testClient(t, hb), name, WithTTL(long), WithPrefix("A:"))
		l, err := mu.Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		onA = append(onA, watchLease(l, time.Now(), long))
		time.Sleep(60 * time.Millisecond)
	}
	hb.stop("A:") // before a1's first renewal (due at long/3 minus a slack of long/12): every renewal on A hangs
	time.Sleep(200 * time.Millisecond)
	mu, _ := NewMutex(testClient(t, hb), "l", WithTTL(short), WithPrefix("B:"))
	l, err := mu.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wl := watchLease(l, time.Now(), short)
	for end := time.Now().Add(4 * short); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !wl.end().IsZero() {
			t.Fatalf("L, on a healthy node, was lost %v after its grant: %v", wl.end().Sub(wl.granted), context.Cause(l.Context()))
		}
		if m.TTL(keyspace.KeyBase("B:", "l")) <= 0 && !m.Exists(keyspace.KeyBase("B:", "l")) {
			t.Fatal("L's key expired on the server: it was not renewed")
		}
	}
	for i, w := range onA {
		for deadline := time.Now().Add(2 * long); w.end().IsZero() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if w.end().IsZero() {
			t.Fatalf("lease a%d on the hung node never told its loss", i+1)
		}
		if late := w.end().Sub(w.granted.Add(long)); late > timerSlack {
			t.Errorf("lease a%d on the hung node told its loss %v after its TTL", i+1, late)
		}
	}
	l.Release(context.Background())
}

// TestRenewExtendOnlyToldAtOnce: two Redlocks in one process, X over a node
// that hangs, Y over a healthy one whose key is deleted. Y's renewal finds
// the lease gone: its Context ends then, not when X's renewal gives up.
func TestRenewExtendOnlyToldAtOnce(t *testing.T) {
	_, bx := newMiniBackend(t)
	my, by := newMiniBackend(t)
	hx := newHangs(bx)
	t.Cleanup(hx.resume)
	const ttlX, ttlY = 1200 * time.Millisecond, 900 * time.Millisecond
	x, _ := NewRedlock(testClients(t, []backend.Backend{hx}), "x", WithTTL(ttlX))
	y, _ := NewRedlock(testClients(t, []backend.Backend{by}), "y", WithTTL(ttlY))
	lx, err := x.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lx.Release(context.Background())
	ly, err := y.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wy := watchLease(ly, time.Now(), ttlY)
	hx.stop("")
	time.Sleep(100 * time.Millisecond)
	my.Del(keyspace.KeyBase(kit.DefaultPrefix, "y"))
	deleted := time.Now()
	for deadline := time.Now().Add(2 * ttlY); wy.end().IsZero() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if wy.end().IsZero() {
		t.Fatal("Y was never told its loss")
	}
	if took := wy.end().Sub(deleted); took > ttlY/3+timerSlack+50*time.Millisecond {
		t.Errorf("Y told its loss %v after its key was deleted: its renewal (every %v) found it gone long before", took, ttlY/3)
	}
}

// TestRenewDeafDriverDeadline: a driver that ignores contexts (go-redis
// without ContextTimeoutEnabled) holds a renewal for as long as the server
// hangs; the lease's Context still ends at its deadline by the client's
// clock.
func TestRenewDeafDriverDeadline(t *testing.T) {
	_, b := newMiniBackend(t)
	hb := newHangs(b)
	hb.deaf = true
	defer hb.resume()
	const ttl = 300 * time.Millisecond
	mu, _ := NewMutex(testClient(t, hb), "d", WithTTL(ttl))
	start := time.Now()
	l, err := mu.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := watchLease(l, start, ttl)
	hb.stop("")
	time.Sleep(ttl + 2*timerSlack)
	if w.end().IsZero() {
		t.Fatalf("the Context was live %v after the grant, TTL %v: a renewal held up by a deaf driver kept it alive", time.Since(start), ttl)
	}
	if late := w.end().Sub(start.Add(ttl)); late > timerSlack {
		t.Errorf("told %v after the TTL", late)
	}
	if err := l.Context().Err(); err == nil {
		t.Error("Err is nil on a lease past its deadline")
	}
}

// TestExtendNotHeldByRenewal: while a renewal hangs on a stopped node,
// Extend with a short context returns when that context ends, instead of
// waiting for the renewal.
func TestExtendNotHeldByRenewal(t *testing.T) {
	_, b := newMiniBackend(t)
	hb := newHangs(b)
	hb.deaf = true
	defer hb.resume()
	const ttl = 600 * time.Millisecond
	mu, _ := NewMutex(testClient(t, hb), "e", WithTTL(ttl))
	l, err := mu.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hb.stop("")
	time.Sleep(ttl/3 + 50*time.Millisecond) // the first renewal is in flight, hung
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Extend(ctx, ttl)
	if took := time.Since(start); took > 100*time.Millisecond+timerSlack {
		t.Fatalf("Extend with a 100ms context returned after %v (%v)", took, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend: %v, want DeadlineExceeded", err)
	}
}

// A Redlock whose one instance hangs keeps its lease alive on the others:
// a renewal is decided by the quorum's answers, not held up by the hung
// instance's timeout. (With releases and extends waiting a second for
// every instance, leases under about 2 s were lost.)
func TestRedlockRenewalBesideHungInstance(t *testing.T) {
	var bs []backend.Backend
	var hung *hangs
	for i := range 5 {
		_, b := newMiniBackend(t)
		if i == 0 {
			hung = newHangs(b)
			t.Cleanup(hung.resume)
			b = hung
		}
		bs = append(bs, b)
	}
	const ttl = 900 * time.Millisecond
	rl, err := NewRedlock(testClients(t, bs), "h", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := rl.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hung.stop("")
	w := watchLease(l, time.Now(), ttl)
	time.Sleep(3 * ttl)
	if end := w.end(); !end.IsZero() {
		t.Fatalf("lease lost %v after its grant with 4 of 5 instances answering: %v", end.Sub(w.granted), context.Cause(l.Context()))
	}
	hung.resume()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// clusterHangs is hangs on a Cluster: its batches span nodes, and a batch
// with a call on the hung node blocks as a whole (a ClusterClient's
// pipeline waits for every node).
type clusterHangs struct{ *hangs }

func (clusterHangs) Cluster() bool { return true }

// TestRenewClusterHealthyLeaseNotHeldByHungNode: on a Cluster, a lease on a
// healthy node is renewed on time although a lease on a hung node came
// due with it: its renewal does not wait in one batch with the hung one.
// (Before: the two went out in one chunk, which waited half the time its
// earliest lease had left, and the healthy lease was renewed alone only
// then: under load, short TTLs beside a hung node ran out,
// TestTimelyManyLeases/cluster node hangs/go-redis under -race.)
func TestRenewClusterHealthyLeaseNotHeldByHungNode(t *testing.T) {
	_, b := newMiniBackend(t)
	hb := clusterHangs{newHangs(b)}
	t.Cleanup(hb.resume)
	const ttl = 3 * time.Second
	h, _ := NewMutex(testClient(t, hb), "h", WithTTL(ttl), WithPrefix("A:"))
	l, _ := NewMutex(testClient(t, hb), "l", WithTTL(ttl), WithPrefix("B:"))
	ctx := context.Background()
	hl, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	hb.stop("A:")
	// Both are due at ttl/3 (1 s), less the renewer's slack (ttl/12).
	time.Sleep(time.Until(granted.Add(1500 * time.Millisecond)))
	deadline := ll.(*kit.Lease).Deadline()
	if left := deadline.Sub(granted); left < ttl+500*time.Millisecond {
		t.Errorf("1.5 s after its grant the healthy lease's deadline is %v after the grant: not renewed at its due time (1 s) beside the hung node", left.Round(time.Millisecond))
	}
	hb.resume()
	ll.Release(ctx)
	hl.Release(ctx)
}
