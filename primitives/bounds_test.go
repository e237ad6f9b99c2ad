package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// Every bound in the code, tested at and beyond its edge (issue 28, item
// 2; the list is docs/bounds.md): the traffic goes past the bound, or a
// late copy arrives after the window, and the promise still holds, or the
// test shows the bound the README states.

// boundServer is a miniredis whose clock only the test moves (ClockTTL:
// keys expire by the TIME the scripts read), so a minute's window is
// crossed at once.
type boundServer struct {
	m   *miniredis.Miniredis
	c   *redis.Client // the test's own view
	b   *stalling     // what the primitives run on
	mu  sync.Mutex
	now time.Time
}

func startBoundServer(t *testing.T) *boundServer {
	t.Helper()
	s := &boundServer{m: miniredis.RunT(t), now: time.Now()}
	s.m.SetTime(s.now)
	s.m.ClockTTL(true)
	s.c = redis.NewClient(&redis.Options{Addr: s.m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { s.c.Close() })
	s.b = &stalling{Backend: goredis.New(s.c)}
	return s
}

// pass lets d go by on the server's clock.
func (s *boundServer) pass(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
	s.m.SetTime(s.now)
}

// evalCall is one Eval: a copy of it can be run again later.
type evalCall struct {
	s          *backend.Script
	keys, args []string
}

// stalling is a backend whose next Eval of a primitive's script, once
// armed, is kept instead of run, as a paused server keeps a command in its socket, and answered with
// context.DeadlineExceeded: the caller cannot know whether it ran. The test
// runs the kept copy later (late). With between set, the next Eval runs,
// then between, then runs again, returning the second reply: a command
// whose reply was lost and which the driver resent.
type stalling struct {
	backend.Backend
	mu      sync.Mutex
	armed   bool
	kept    []evalCall
	between func()
}

func (s *stalling) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	if !keyspace.OfPrimitive(keys) {
		// The Client's record, written once it has been busy for a
		// second: it must not take the place of the attempt the test
		// stalls.
		return s.Backend.Eval(ctx, sc, keys, args)
	}
	s.mu.Lock()
	armed, between := s.armed, s.between
	s.armed, s.between = false, nil
	if armed {
		s.kept = append(s.kept, evalCall{sc, append([]string(nil), keys...), append([]string(nil), args...)})
	}
	s.mu.Unlock()
	if armed {
		return nil, context.DeadlineExceeded
	}
	if between != nil {
		if _, err := s.Backend.Eval(ctx, sc, keys, args); err != nil {
			return nil, err
		}
		between()
	}
	return s.Backend.Eval(ctx, sc, keys, args)
}

func (s *stalling) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

// late runs the i-th kept call now, on the server.
func (s *stalling) late(t *testing.T, i int) backend.Value {
	t.Helper()
	s.mu.Lock()
	c := s.kept[i]
	s.mu.Unlock()
	v, err := s.Backend.Eval(context.Background(), c.s, c.keys, c.args)
	if err != nil {
		t.Fatalf("late copy: %v", err)
	}
	return v
}

// boundKinds: every primitive with a single attempt that gives back, each
// taking one holder at a time (a Semaphore of limit 1), on b under prefix p.
var boundKinds = []struct {
	name string
	open func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error)
}{
	{"Mutex", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		m, err := primitives.NewMutex(c, "n", opts...)
		if err != nil {
			return nil, err
		}
		return m.TryLock, nil
	}},
	{"Semaphore", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		s, err := primitives.NewSemaphore(c, "n", 1, opts...)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire, nil
	}},
	{"FairSemaphore", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		s, err := primitives.NewFairSemaphore(c, "n", 1, opts...)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire, nil
	}},
	{"RWLock", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		rw, err := primitives.NewRWLock(c, "n", opts...)
		if err != nil {
			return nil, err
		}
		return rw.TryLock, nil
	}},
	{"MultiLock", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		m, err := primitives.NewMultiLock(c, []string{"n", "o"}, opts...)
		if err != nil {
			return nil, err
		}
		return m.TryLock, nil
	}},
	{"Election", func(c *primitives.Client, opts ...primitives.Option) (func(context.Context) (latchkit.Lease, error), error) {
		e, err := primitives.NewElection(c, "n", opts...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, "v") }, nil
	}},
}

const boundTTL = 10 * time.Second

func boundOpts(prefix string) []primitives.Option {
	return []primitives.Option{primitives.WithPrefix(prefix), primitives.WithAutoExtend(false), primitives.WithTTL(boundTTL)}
}

// stuckTry makes one try whose attempt is kept, not run (a paused server),
// so that it fails and gives back its token.
func stuckTry(t *testing.T, s *boundServer, try func(context.Context) (latchkit.Lease, error)) {
	t.Helper()
	s.b.arm()
	if l, err := try(context.Background()); err == nil {
		t.Fatalf("a try whose attempt never ran was granted (fence %d)", l.Fence())
	}
}

// free reports whether the primitive can be taken now; it releases what it
// took, and returns the grant's fence (0 when held).
func free(t *testing.T, try func(context.Context) (latchkit.Lease, error)) int64 {
	t.Helper()
	l, err := try(context.Background())
	if errors.Is(err, latchkit.ErrNotAcquired) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l.Fence()
}

// A late copy of a given-up attempt within the give-back window (a minute,
// markerTTL) is refused; one later than that may grant, and then the grant
// is nobody's for at most its TTL: it expires, and the next grant's fence
// is above every earlier one. The README states the minute ("remembers the
// token as given back for a minute").
func TestBoundGivenBackWindow(t *testing.T) {
	for _, k := range boundKinds {
		t.Run(k.name, func(t *testing.T) {
			s := startBoundServer(t)
			try, err := k.open(clienttest.For(t, s.b), boundOpts("w:")...)
			if err != nil {
				t.Fatal(err)
			}
			f0 := free(t, try)
			stuckTry(t, s, try) // kept[0]
			stuckTry(t, s, try) // kept[1]

			s.pass(time.Minute - time.Second)
			s.b.late(t, 0)
			f1 := free(t, try)
			if f1 == 0 {
				t.Fatalf("a copy of a given-up attempt 59 s late was granted: the primitive is held by nobody")
			}
			noKeyWithoutExpiry(t, s.c)

			s.pass(2 * time.Second) // 61 s after the give-back: past the window
			s.b.late(t, 1)
			f2 := free(t, try)
			if f2 != 0 {
				t.Logf("a copy 61 s late was refused too")
			} else {
				t.Logf("a copy 61 s late was granted: the primitive is nobody's for its TTL (the bound the README states)")
			}
			noKeyWithoutExpiry(t, s.c)
			s.pass(boundTTL)
			f3 := free(t, try)
			if f3 == 0 {
				t.Fatalf("the late copy's grant outlived its TTL %v", boundTTL)
			}
			if !(f0 < f1 && f1 < f3) || (f2 != 0 && !(f1 < f2 && f2 < f3)) {
				t.Errorf("fences %d, %d, %d, %d: not strictly increasing", f0, f1, f2, f3)
			}
			noKeyWithoutExpiry(t, s.c)
			s.pass(25 * time.Hour) // every TTL, marker and the default retention
			if keys := keyspace.WithoutClientRecords(s.m.Keys()); len(keys) != 0 {
				t.Errorf("keys left once every window and the retention have passed: %v", keys)
			}
		})
	}
}

// givenBackCap is the cap remember (lua/prelude.lua) once had on the
// finished tokens of a name (1024, removed by 481fd1e): the tests below go
// past it, within the minute every token is remembered for.
const givenBackCap = 1024

// More give-backs than the cap within the window: each still gives back
// (the primitive is free after each), and a late copy of the first one's
// attempt, still within the minute the README promises, is refused.
func TestBoundGivenBackCap(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	for _, k := range lane.Pick(boundKinds[:2], boundKinds) {
		t.Run(k.name, func(t *testing.T) {
			s := startBoundServer(t)
			try, err := k.open(clienttest.For(t, s.b), boundOpts("c:")...)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < givenBackCap+10; i++ {
				// A millisecond apart: with equal scores the set would
				// order (and drop) the tokens by their random bytes.
				s.pass(time.Millisecond)
				stuckTry(t, s, try)
				s.b.mu.Lock()
				s.b.kept = s.b.kept[:1] // the first copy is the one sent late
				s.b.mu.Unlock()
				if i%100 == 0 || i == givenBackCap+9 {
					if free(t, try) == 0 {
						t.Fatalf("after %d give-backs: the primitive is held", i+1)
					}
				}
			}
			s.pass(time.Second)
			s.b.late(t, 0)
			if free(t, try) == 0 {
				t.Errorf("a copy of the first of %d given-up attempts, 1 s late, was granted: the primitive is held by nobody for its TTL (only the last %d given-back tokens are remembered)", givenBackCap+10, givenBackCap)
			}
			noKeyWithoutExpiry(t, s.c)
		})
	}
}

// More releases than the cap within the window, between a release and
// the driver's resend of it (its reply lost): the releases remember
// nothing, so the name keeps no key but its last fence (the clock stands
// still here), however many there were; and a late
// copy of an attempt given up before them is still refused (a give-back
// remembers its token). The resend finds the token gone: the client saw
// no lost reply (the driver resent within one call), so it may report
// ErrLeaseLost; a release the caller retries after a lost reply is judged
// by the client (TestRetriedReleaseAfterAnotherHolderReleased). (Until
// issue 39 every release remembered its token for a minute, and the
// resend reported success from that memory.)
func TestBoundSemaphoreReleasesPastCap(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	t.Run("resent release", func(t *testing.T) {
		s := startBoundServer(t)
		sem, err := primitives.NewSemaphore(clienttest.For(t, s.b), "n", 2, boundOpts("r:")...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := sem.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		s.b.mu.Lock()
		s.b.between = func() {
			s.pass(time.Millisecond)
			cycles(t, s.b.Backend, "r:", givenBackCap)
			left = keyspace.WithoutClientRecords(s.m.Keys())
		}
		s.b.mu.Unlock()
		if err := l.Release(context.Background()); err != nil && !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("a release resent after %d other releases: %v", givenBackCap, err)
		}
		// The clock stands still through the cycles: the last fence, not
		// behind it, is kept; nothing else.
		if msg := keptFenceOnly(s.m, left); msg != "" {
			t.Errorf("keys left by %d releases: %s (a release remembers nothing)", givenBackCap+1, msg)
		}
		if msg := keptFenceOnly(s.m, keyspace.WithoutClientRecords(s.m.Keys())); msg != "" {
			t.Errorf("after the resend: %s", msg)
		}
	})
	t.Run("late attempt", func(t *testing.T) {
		s := startBoundServer(t)
		sem, err := primitives.NewSemaphore(clienttest.For(t, s.b), "n", 1, boundOpts("a:")...)
		if err != nil {
			t.Fatal(err)
		}
		stuckTry(t, s, sem.TryAcquire)
		s.pass(time.Millisecond)
		cycles(t, s.b.Backend, "a:", givenBackCap)
		s.b.late(t, 0)
		if free(t, sem.TryAcquire) == 0 {
			t.Errorf("a copy of an attempt given up before %d releases, within the minute, was granted: a permit held by nobody for its TTL", givenBackCap)
		}
	})
}

// cycles takes and releases a permit of the Semaphore "n" (limit 1) under
// prefix n times, on b itself.
func cycles(t *testing.T, b backend.Backend, prefix string, n int) {
	sem, err := primitives.NewSemaphore(clienttest.For(t, b), "n", 1, boundOpts(prefix)...)
	if err != nil {
		t.Error(err)
		return
	}
	for i := 0; i < n; i++ {
		l, err := sem.TryAcquire(context.Background())
		if err != nil {
			t.Errorf("cycle %d: %v", i, err)
			return
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("cycle %d: release: %v", i, err)
			return
		}
	}
}

// A release resent after the marker's window (60 s), when the primitive
// has a new holder, leaves the new holder alone; it may report
// ErrLeaseLost (the README: "a release marker that lives 60 s").
func TestBoundReleaseMarkerWindow(t *testing.T) {
	for _, k := range boundKinds {
		t.Run(k.name, func(t *testing.T) {
			s := startBoundServer(t)
			try, err := k.open(clienttest.For(t, s.b), boundOpts("m:")...)
			if err != nil {
				t.Fatal(err)
			}
			l1, err := try(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var l2 latchkit.Lease
			s.b.mu.Lock()
			s.b.between = func() {
				s.pass(time.Minute + time.Second)
				if l2, err = try(context.Background()); err != nil {
					t.Errorf("the next holder: %v", err)
				}
			}
			s.b.mu.Unlock()
			if err := l1.Release(context.Background()); err != nil && !errors.Is(err, latchkit.ErrLeaseLost) {
				t.Errorf("a release resent 61 s late: %v", err)
			}
			if l2 == nil {
				return
			}
			if d, err := l2.TTL(context.Background()); err != nil || d <= 0 {
				t.Errorf("the next holder after a release resent 61 s late: TTL %v, %v", d, err)
			}
			if err := l2.Release(context.Background()); err != nil {
				t.Errorf("the next holder's release: %v", err)
			}
			noKeyWithoutExpiry(t, s.c)
		})
	}
}

// The least retention, 1 ms: the fence counter expires a millisecond after
// each grant, and fences still strictly increase, grant after grant,
// whether the counter is still there (the same millisecond) or gone;
// nothing is left without an expiry, and nothing at all once the windows
// have passed.
func TestBoundLeastRetention(t *testing.T) {
	for _, k := range boundKinds {
		t.Run(k.name, func(t *testing.T) {
			s := startBoundServer(t)
			try, err := k.open(clienttest.For(t, s.b), append(boundOpts("f:"), primitives.WithRetention(time.Millisecond))...)
			if err != nil {
				t.Fatal(err)
			}
			var last int64
			for i, step := range []time.Duration{0, 0, time.Millisecond, 2 * time.Millisecond, time.Microsecond, time.Second, 0} {
				s.pass(step)
				f := free(t, try)
				if f <= last {
					t.Fatalf("grant %d (%v after the last): fence %d, not above %d", i, step, f, last)
				}
				last = f
				noKeyWithoutExpiry(t, s.c)
			}
			s.pass(time.Minute + time.Second)
			if keys := keyspace.WithoutClientRecords(s.m.Keys()); len(keys) != 0 {
				t.Errorf("keys left a minute after the last grant, with a 1 ms retention: %v", keys)
			}
		})
	}
	for _, d := range []time.Duration{0, time.Millisecond - 1} {
		if _, err := primitives.NewMutex(clienttest.For(t, startBoundServer(t).b), "n", primitives.WithRetention(d)); !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("a retention of %v: %v, want ErrInvalid", d, err)
		}
	}
}

// A leader value of maxLeaderValue bytes is seated; one byte more is
// ErrInvalid and writes nothing.
func TestBoundLeaderValue(t *testing.T) {
	s := startBoundServer(t)
	e, err := primitives.NewElection(clienttest.For(t, s.b), "n", boundOpts("v:")...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.TryCampaign(ctx, strings.Repeat("x", maxLeaderValue+1)); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("a value of %d bytes: %v, want ErrInvalid", maxLeaderValue+1, err)
	}
	if keys := keyspace.WithoutClientRecords(s.m.Keys()); len(keys) != 0 {
		t.Errorf("a refused value wrote %v", keys)
	}
	v := strings.Repeat("x", maxLeaderValue)
	l, err := e.TryCampaign(ctx, v)
	if err != nil {
		t.Fatalf("a value of %d bytes: %v", len(v), err)
	}
	leaderIs(t, ctx, e, primitives.LeaderInfo{Value: v, Fence: l.Fence()}, "seated with the longest value")
}

// maxObserved: an observer that does not read while more leader changes
// than it keeps messages for (1024) go by still ends at the leader that
// stands, and never reports a fence below one it reported.
func TestBoundObserverBacklog(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	s := startBoundServer(t)
	// A minute's seat: its expiry, which makes the observer read again,
	// must not be what ends the test.
	e, err := primitives.NewElection(clienttest.For(t, s.b), "n", primitives.WithPrefix("o:"), primitives.WithAutoExtend(false), primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := e.TryCampaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	obs := e.Observe(ctx)
	if info := <-obs; info.Value != "first" {
		t.Fatalf("first observed %+v", info)
	}
	const changes = 1100 // each a seat and an empty seat: 2200 messages
	for i := 0; i < changes; i++ {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err = e.TryCampaign(ctx, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprint("v", changes-1)
	var last int64
	drain := time.After(10 * time.Second)
	for {
		var info primitives.LeaderInfo
		select {
		case info = <-obs:
		case <-drain:
			t.Fatalf("the observer never reported the standing leader %q (fence %d) within 10 s", want, l.Fence())
		}
		if info.Fence != 0 && info.Fence < last {
			t.Fatalf("observed fence %d after %d", info.Fence, last)
		}
		last = max(last, info.Fence)
		if info.Value == want && info.Fence == l.Fence() {
			return
		}
	}
}

// maxLeaderValue is the longest value a campaign may give (4096 bytes).
const maxLeaderValue = 4096

// TestBoundFairScanBatch (issue 38, finding 11): fair_ahead
// (primitives/lua/blocks_fair.lua) reads a FairSemaphore's queue 100 tickets
// at a time when weights are stored. A waiting ticket at index 101, behind
// 101 holders, still counts: a TryAcquire does not overtake it, and the
// release that makes room hands it the permits.
func TestBoundFairScanBatch(t *testing.T) {
	s := startBoundServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const holders = 101
	sem, err := primitives.NewFairSemaphore(clienttest.For(t, s.b), "q", holders+2, boundOpts("f:")...)
	if err != nil {
		t.Fatal(err)
	}
	// The first holder takes 2 permits (a weight is stored: the queue is
	// read by batches), 100 more one each: 102 of 103 held.
	first, err := sem.TryAcquireN(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	leases := []latchkit.Lease{first}
	for len(leases) < holders {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("holder %d: %v", len(leases)+1, err)
		}
		leases = append(leases, l)
	}
	// X, at index 101 of the queue, past the first batch, waits for 2.
	got := make(chan latchkit.Lease, 1)
	go func() {
		l, err := sem.AcquireN(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	queue := keyspace.FairLayout.KeysOf("f:", "q")[0]
	for n := int64(0); n != holders+1; time.Sleep(time.Millisecond) {
		if n, err = s.c.ZCard(ctx, queue).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := sem.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("a TryAcquire with X waiting at index 101: %v, %v; want ErrNotAcquired", l, err)
	}
	// One permit back: X's two fit (103 held), and are X's.
	if err := leases[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	x := <-got
	if x == nil {
		t.FailNow()
	}
	for _, l := range append(leases[2:], first, x) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBoundAnnotation (issue 38, finding 11; the bound MaxAnnotation of
// docs/bounds.md): a grant stores its request's Annotation (a tracing
// middleware's span context, read back by waiters) of up to 256 bytes
// beside it; a longer one is not stored, and the grant is made all the
// same.
func TestBoundAnnotation(t *testing.T) {
	s := startBoundServer(t)
	ctx := context.Background()
	for _, n := range []int{256, 257} {
		note := strings.Repeat("a", n)
		annotate := func(next latchkit.Acquire) latchkit.Acquire {
			return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
				req.Annotation = note
				return next(ctx, req)
			}
		}
		name := fmt.Sprint("note", n)
		m, err := primitives.NewMutex(clienttest.For(t, s.b), name, append(boundOpts("a:"), primitives.WithMiddleware(annotate))...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatalf("an annotation of %d bytes: %v", n, err)
		}
		who, _ := s.m.Get(keyspace.KeyBase("a:", name) + ":who")
		if stored := who == note; stored != (n <= 256) {
			t.Errorf("an annotation of %d bytes: stored %v (the key holds %d bytes)", n, stored, len(who))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBoundStoredLimitRetention (issue 38, finding 11): a limit SetLimit
// stored lives the retention (1 h here) from the last grant or SetLimit:
// a grant 59 min on keeps it another hour; an hour and a minute without
// one, it is gone, and the name grants by its constructor's limit again.
func TestBoundStoredLimitRetention(t *testing.T) {
	s := startBoundServer(t)
	ctx := context.Background()
	for _, fair := range []bool{false, true} {
		newSem, prefix := primitives.NewSemaphore, "sl:"
		if fair {
			newSem, prefix = primitives.NewFairSemaphore, "fl:"
		}
		sem, err := newSem(clienttest.For(t, s.b), "pool", 1, primitives.WithPrefix(prefix), primitives.WithAutoExtend(false),
			primitives.WithTTL(boundTTL), primitives.WithRetention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := sem.SetLimit(ctx, 2); err != nil {
			t.Fatal(err)
		}
		grants := func() int { // how many TryAcquires are granted at once now
			var ls []latchkit.Lease
			for {
				l, err := sem.TryAcquire(ctx)
				if err != nil {
					break
				}
				ls = append(ls, l)
			}
			for _, l := range ls {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			return len(ls)
		}
		s.pass(59 * time.Minute)
		if n := grants(); n != 2 {
			t.Errorf("fair %v: 59 min after SetLimit(2): %d grants at once, want 2", fair, n)
		}
		s.pass(59 * time.Minute)
		if n := grants(); n != 2 {
			t.Errorf("fair %v: 59 min after a grant: %d grants at once, want 2 (the limit kept)", fair, n)
		}
		s.pass(61 * time.Minute)
		if n := grants(); n != 1 {
			t.Errorf("fair %v: 61 min after the last grant: %d grants at once, want 1 (the constructor's limit)", fair, n)
		}
	}
}
