package contracttest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/nilness"
	"github.com/latchkit/latchkit/primitives"
)

// Run runs the whole suite against h: first the backend contract itself,
// then every primitive through its public API.
func Run(t *testing.T, h Harness) {
	mustHarness(t, h)
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) { g.fn(t, h) })
	}
}

// RunGroups runs the named groups of the suite (the subtests of Run:
// "Backend", "Mutex", "GiveUp", ...) against h, in the suite's order: a
// second configuration of a driver that differs from the first in one
// respect (a client that ignores context deadlines) runs the groups that
// respect matters to. An unknown name fails t.
func RunGroups(t *testing.T, h Harness, names ...string) {
	mustHarness(t, h)
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, g := range groups {
		if want[g.name] {
			delete(want, g.name)
			t.Run(g.name, func(t *testing.T) { g.fn(t, h) })
		}
	}
	for n := range want {
		t.Errorf("contracttest: no group %q", n)
	}
}

// runGroupsApart runs every group of the suite as a parallel subtest,
// each against a Harness of its own from mk.
func runGroupsApart(t *testing.T, mk func(t *testing.T) Harness) {
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			h := mk(t)
			mustHarness(t, h)
			g.fn(t, h)
		})
	}
}

// groups are the suite's top-level subtests, in the order they run.
var groups = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"Backend", RunBackend},
	{"Batch", RunBatch},
	{"Mutex", RunMutex},
	{"HandOver", RunHandOver},
	{"GiveUp", RunGiveUp},
	{"ReentrantMutex", RunReentrant},
	{"Semaphore", RunSemaphore},
	{"Weighted", RunWeighted},
	{"Election", RunElection},
	{"RWLock", RunRWLock},
	{"Fair", RunFair},
	{"MultiLock", RunMultiLock},
	{"Latch", RunLatch},
	{"ReplicaAck", RunReplicaAck},
	{"Holder", RunHolder},
}

// step is one named subtest.
type step struct {
	name string
	fn   func(t *testing.T, h Harness)
}

func runSteps(t *testing.T, h Harness, steps []step) {
	mustHarness(t, h)
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.fn(t, h) })
	}
}

// mustHarness fails t, a suite's entry point's, when h is nil: the
// caller's mistake, told as such rather than as a panic in the suite.
func mustHarness(t *testing.T, h Harness) {
	t.Helper()
	if nilness.Is(h) {
		t.Fatal("contracttest: nil Harness: give the driver's harness")
	}
}

// prefix is the key prefix of a subtest: its name, so that subtests sharing
// a server never share a key.
func prefix(t testing.TB) string {
	r := strings.NewReplacer("{", "_", "}", "_", " ", "_")
	return "ct:" + r.Replace(t.Name()) + ":"
}

// ctxT returns a context ending with the test (or after d).
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The suite inspects and arranges Redis state through the backend under
// test itself: a script running one command on one key.
var (
	cmdScript = backend.NewScript(`return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))`)
	// pubScript publishes ARGV[2] on channel ARGV[1] through the node of
	// KEYS[1], which only routes the call.
	pubScript = backend.NewScript(`return redis.call('PUBLISH', ARGV[1], ARGV[2])`)
)

// do runs cmd on key with args.
func do(t testing.TB, b backend.Backend, cmd, key string, args ...string) backend.Value {
	t.Helper()
	v, err := b.Eval(context.Background(), cmdScript, []string{key}, append([]string{cmd}, args...))
	if err != nil {
		t.Fatalf("%s %s: %v", cmd, key, err)
	}
	return v
}

// keyOf is the key base of a primitive named name under prefix p (a
// Mutex's lock key; see keyspace.Layout for the others).
func keyOf(p, name string) string { return keyspace.KeyBase(p, name) }

// lockValue is what the lock key of a Mutex-layout lease holds: its token
// and its fence.
func lockValue(l latchkit.Lease) string { return l.Token() + " " + strconv.FormatInt(l.Fence(), 10) }

// lockFree reports whether the Mutex-layout lock key holds no lease: it
// is absent, or holds a free marker ("~ fence [flags]"), which a release
// leaves while the fence is not behind the server's clock (one that
// stands still, as a test server's may) or tokens were given back.
func lockFree(t testing.TB, b backend.Backend, key string) bool {
	t.Helper()
	v := do(t, b, "GET", key)
	s, _ := v.(string)
	return v == nil || strings.HasPrefix(s, "~ ")
}

// advance moves the server clock by d, or sleeps when it cannot.
func advance(t testing.TB, h Harness, d time.Duration) {
	if !h.AdvanceClock(t, d) {
		time.Sleep(d)
	}
}

// countAttempts is a middleware option adding every attempt of the
// primitive's acquisitions to n.
func countAttempts(n *atomic.Int64) primitives.Option {
	return primitives.WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			prev := req.OnAttempt
			req.OnAttempt = func(i int, err error) {
				n.Add(1)
				if prev != nil {
					prev(i, err)
				}
			}
			return next(ctx, req)
		}
	})
}

// eventually polls cond every few milliseconds until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// gauge counts the holders inside a critical section and keeps the peak.
type gauge struct{ n, peak atomic.Int32 }

// enter counts one more holder and returns how many are inside now.
func (g *gauge) enter() int32 {
	n := g.n.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	return n
}

func (g *gauge) leave() { g.n.Add(-1) }

// incr adds one to the counter at key by a plain GET, then a SET: not
// atomic on purpose, so that two holders at once lose an update. pause runs
// between the read and the write, to widen that window.
func incr(ctx context.Context, b backend.Backend, key string, pause time.Duration) error {
	v, err := b.Eval(ctx, cmdScript, []string{key}, []string{"GET"})
	if err != nil {
		return err
	}
	n := int64(0)
	if s, ok := v.(string); ok {
		n, _ = strconv.ParseInt(s, 10, 64)
	}
	time.Sleep(pause)
	_, err = b.Eval(ctx, cmdScript, []string{key}, []string{"SET", strconv.FormatInt(n+1, 10)})
	return err
}

var idSeq atomic.Int64

// newID returns a string unique within the process run.
func newID() string {
	return fmt.Sprintf("%d-%d", time.Now().UnixNano(), idSeq.Add(1))
}
