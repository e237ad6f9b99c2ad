// Package resptest holds the tests that every adapter over a driver of
// the rueidis family (rueidis, valkey-go) runs, written once: the calls of
// a backend return by their context's end whatever the server and the
// dial do (RunDeadlines), and replies normalize to backend.Value
// (FuzzNormalize). An adapter's test says only how to make its client
// (Driver).
package resptest

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/cpuhog"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// Dialer is the dial function both drivers take (ClientOption.DialCtxFn).
type Dialer = func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error)

// Backend is what the tests call: a backend with every optional interface
// of the rueidis family (so that making one checks that an adapter has
// them all).
type Backend interface {
	backend.Backend
	backend.Batcher
	backend.ReplicaAcker
	backend.Unwrapper
	backend.Cluster
}

// Driver makes backends of the adapter under test.
type Driver struct {
	// New returns a backend over a new client of the server at addr,
	// closed when t ends. dial, when not nil, is the client's dialer and
	// dialTimeout, when not zero, its dial timeout; otherwise the
	// driver's defaults hold. It fails t when the client cannot be made.
	New func(t testing.TB, addr string, dial Dialer, dialTimeout time.Duration) Backend
	// Race is whether the race detector is on: allocation counts mean
	// nothing under it, and calls run slower.
	Race bool
}

// RunDeadlines runs the deadline tests on d, each a subtest.
func RunDeadlines(t *testing.T, d Driver) {
	t.Run("TryLockDeadlineUnreachable", func(t *testing.T) { tryLockDeadlineUnreachable(t, d) })
	t.Run("DeadlineWhileDialing", func(t *testing.T) { deadlineWhileDialing(t, d) })
	t.Run("DeadlineHungServer", func(t *testing.T) { deadlineHungServer(t, d) })
	t.Run("SubscriptionDeadlineHungServer", func(t *testing.T) { subscriptionDeadlineHungServer(t, d) })
	t.Run("EvalAllocs", func(t *testing.T) { evalAllocs(t, d) })
}

// raceSlack is added to the slack under the race detector, whose
// instrumented code runs several times slower on a busy machine: the
// failures the bound catches are a dial timeout late.
const raceSlack = 200 * time.Millisecond

// slack is how late past its deadline a call may return: scheduling, not a
// performance target. The machines the tests run on have 2 cores, and
// other packages' tests run beside these with busy processes of their own
// (internal/cpuhog): calls were seen returning 111 ms past their deadline
// there, so 100 ms would fail now and then. The failures the bound
// catches are late by the dial timeout (a second here, 5 s by default).
const slack = 250 * time.Millisecond

// slack is how late past its deadline a call of d may return.
func (d Driver) slack() time.Duration {
	if d.Race {
		return slack + raceSlack
	}
	return slack
}

// tryScript writes, as an acquire attempt does.
var tryScript = backend.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 10000) and 1 or 0`)

// op is one backend call under test.
type op struct {
	name string
	call func(ctx context.Context, b Backend) error
}

// ops are the calls under test: the first two use the client's pipelined
// connections, which calls share (and wait for one dial), the others a
// dedicated connection each.
var ops = []op{
	{"Eval", func(ctx context.Context, b Backend) error {
		_, err := b.Eval(ctx, tryScript, []string{"k"}, []string{"tok"})
		return err
	}},
	{"EvalBatch", func(ctx context.Context, b Backend) error {
		calls := []backend.Call{
			{Script: tryScript, Keys: []string{"k1"}, Args: []string{"tok"}},
			{Script: tryScript, Keys: []string{"k2"}, Args: []string{"tok"}},
		}
		b.EvalBatch(ctx, calls)
		return errors.Join(calls[0].Err, calls[1].Err)
	}},
	{"EvalAck", func(ctx context.Context, b Backend) error {
		_, _, err := b.EvalAck(ctx, tryScript, []string{"k3"}, []string{"tok"}, 1, 50*time.Millisecond)
		return err
	}},
	{"Subscribe", func(ctx context.Context, b Backend) error {
		s, err := b.Subscribe(ctx, backend.Handler{})
		if err == nil {
			s.Close()
		}
		return err
	}},
}

var holes = []struct {
	name string
	addr func(t *testing.T) string
}{
	{"silent listener", func(t *testing.T) string { return redistest.SilentAddr(t) }},
	{"full backlog", fullBacklog},
}

// tryLockDeadlineUnreachable: an attempt with a 3 ms context (a
// TryLock's) against an address that cannot be reached returns an error
// matching context.DeadlineExceeded: "I gave up", not "Redis is down",
// even when the dial's own timeout fires a moment before the context's
// timer (made likely here by busy processes beside the test).
func tryLockDeadlineUnreachable(t *testing.T, d Driver) {
	redistest.Require(t)
	verifyNoLeaks(t, 3*time.Second)
	cpuhog.Start(t, 2)
	srv := redistest.Start(t)
	for _, h := range holes {
		t.Run(h.name, func(t *testing.T) {
			b := holeClient(t, d, srv, h.addr(t))
			ignore := goleak.IgnoreCurrent()
			const timeout = 3 * time.Millisecond
			for i := 0; i < 30; i++ {
				quiesce(t, ignore) // each attempt dials on its own
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				_, err := b.Eval(ctx, tryScript, []string{"k"}, []string{"tok"})
				took := time.Since(start)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("attempt %d: %v, want an error matching context.DeadlineExceeded", i, err)
				}
				if took > timeout+d.slack() {
					t.Errorf("attempt %d with a %v context returned after %v", i, timeout, took.Round(time.Millisecond))
				}
			}
		})
	}
}

// deadlineWhileDialing: every call returns by its context's end (a
// deadline, or a cancellation) while its connection is being dialed and
// never completes: alone, and behind another call's dial (the driver makes
// concurrent calls wait for one dial, bounded by the dialing call's
// context or the dial timeout, not theirs).
func deadlineWhileDialing(t *testing.T, d Driver) {
	redistest.Require(t)
	verifyNoLeaks(t, 3*time.Second)
	srv := redistest.Start(t)
	const timeout = 100 * time.Millisecond
	for _, h := range holes {
		for _, behind := range []bool{false, true} {
			for _, cancelOnly := range []bool{false, true} {
				for i, o := range ops {
					if behind && i >= 2 {
						continue // a dedicated connection is nobody else's
					}
					name := h.name + "/" + o.name
					if behind {
						name += "/behind another dial"
					}
					if cancelOnly {
						name += "/cancelled"
					} else {
						name += "/deadline"
					}
					t.Run(name, func(t *testing.T) {
						b := holeClient(t, d, srv, h.addr(t))
						if behind {
							// Calls with a long deadline dial first:
							// enough of them to dial each of the
							// pipelined connections, which the driver
							// picks at random.
							long, cancel := context.WithTimeout(context.Background(), 3*time.Second)
							t.Cleanup(cancel)
							for range 8 {
								go func() { _ = o.call(long, b) }()
							}
							time.Sleep(30 * time.Millisecond)
						}
						var ctx context.Context
						var cancel context.CancelFunc
						want := context.DeadlineExceeded
						if cancelOnly {
							ctx, cancel = context.WithCancel(context.Background())
							time.AfterFunc(timeout, cancel)
							want = context.Canceled
						} else {
							ctx, cancel = context.WithTimeout(context.Background(), timeout)
						}
						defer cancel()
						start := time.Now()
						err := o.call(ctx, b)
						took := time.Since(start)
						if took > timeout+d.slack() {
							t.Errorf("%s with a context ending after %v returned after %v: %v", o.name, timeout, took.Round(time.Millisecond), err)
						}
						if !errors.Is(err, want) {
							t.Errorf("%s: %v, want an error matching %v", o.name, err, want)
						}
					})
				}
			}
		}
	}
}

// subscriptionDeadlineHungServer: Add and Remove on a subscription
// whose server is frozen (SIGSTOP) return by their context's end, a
// deadline or a cancellation.
func subscriptionDeadlineHungServer(t *testing.T, d Driver) {
	redistest.Require(t)
	verifyNoLeaks(t, 3*time.Second)
	srv := redistest.Start(t)
	b := d.New(t, srv.Addr, nil, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := b.Subscribe(ctx, backend.Handler{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	const timeout = 100 * time.Millisecond
	for _, cancelOnly := range []bool{false, true} {
		for i, call := range []func(context.Context) error{
			func(ctx context.Context) error { return sub.Add(ctx, "c") },
			func(ctx context.Context) error { return sub.Remove(ctx, "a") },
		} {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			if cancelOnly {
				cctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(timeout, cancel)
			}
			start := time.Now()
			err := call(cctx)
			took := time.Since(start)
			cancel()
			what := []string{"Add", "Remove"}[i]
			if took > timeout+d.slack() {
				t.Errorf("%s (cancel only: %v) returned after %v: %v", what, cancelOnly, took.Round(time.Millisecond), err)
			}
			if err == nil {
				t.Errorf("%s (cancel only: %v) succeeded on a frozen server", what, cancelOnly)
			}
		}
	}
}

// evalAllocs: an Eval whose context can end (so run on a goroutine of
// its own) allocates at most one object more than one made directly (a
// context that never ends): the goroutine's closure; its state is pooled.
func evalAllocs(t *testing.T, d Driver) {
	if d.Race {
		t.Skip("the race detector allocates for goroutines itself")
	}
	redistest.Require(t)
	srv := redistest.Start(t)
	b := d.New(t, srv.Addr, nil, 0)
	keys, args := []string{"k"}, []string{"tok"}
	measure := func(ctx context.Context) float64 {
		if _, err := b.Eval(ctx, tryScript, keys, args); err != nil {
			t.Fatal(err)
		}
		// The least of three runs: the client's own goroutines allocate
		// now and then, whoever calls.
		least := math.Inf(1)
		for range 3 {
			least = min(least, testing.AllocsPerRun(500, func() {
				if _, err := b.Eval(ctx, tryScript, keys, args); err != nil {
					t.Fatal(err)
				}
			}))
		}
		return least
	}
	direct := measure(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bounded := measure(ctx)
	t.Logf("allocs per Eval: direct %v, on its own goroutine %v", direct, bounded)
	if bounded > direct+1 {
		t.Errorf("an Eval on its own goroutine allocates %v, a direct one %v", bounded, direct)
	}
}

// deadlineHungServer: with a client made with default options, every call
// to a server that hangs (SIGSTOP) with its connections open returns by
// its context's end, a deadline or a cancellation, with an error matching
// the context's: a loss is told on time whatever the client's timeouts.
func deadlineHungServer(t *testing.T, d Driver) {
	redistest.Require(t)
	verifyNoLeaks(t, 3*time.Second)
	srv := redistest.Start(t)
	b := d.New(t, srv.Addr, nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range ops {
		if err := o.call(ctx, b); err != nil { // connections open
			t.Fatalf("%s before the pause: %v", o.name, err)
		}
	}
	srv.Pause()
	defer srv.Resume()
	const timeout = 100 * time.Millisecond
	for _, cancelOnly := range []bool{false, true} {
		for _, o := range ops[:3] { // a new subscription dials: see deadlineWhileDialing
			cctx, cancel := context.WithTimeout(ctx, timeout)
			want := context.DeadlineExceeded
			if cancelOnly {
				cctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(timeout, cancel)
				want = context.Canceled
			}
			var err error
			start := time.Now()
			late := schedulerLateness(func() { err = o.call(cctx, b) })
			took := time.Since(start)
			cancel()
			// A call the adapter holds is late by the driver's timeouts
			// (seconds); a process not scheduled (two cores, other test
			// binaries beside this one, the race detector) is late by
			// as much as its timers are: that is not held against it.
			if took > timeout+d.slack()+late {
				t.Errorf("%s (cancel only: %v) returned after %v (timers late by up to %v meanwhile): %v", o.name, cancelOnly, took.Round(time.Millisecond), late.Round(time.Millisecond), err)
			}
			// Or, before the context ended, the server unreachable: the
			// driver failed the call early on a connection that an
			// earlier call's timeout broke (seen once under -race, an
			// EvalBatch on the connection of the Eval before it).
			early := errors.Is(err, backend.ErrUnavailable) && took < timeout
			if !errors.Is(err, want) && !early {
				t.Errorf("%s (cancel only: %v): %v after %v, want an error matching %v (or ErrUnavailable before the context's end)", o.name, cancelOnly, err, took.Round(time.Millisecond), want)
			}
		}
	}
}

// schedulerLateness runs f and returns how late, at most, a timer of this
// process fired while f ran: how long the process, or a goroutine woken by
// a timer, waited for a CPU.
func schedulerLateness(f func()) time.Duration {
	const tick = time.Millisecond
	stop := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() {
		var w time.Duration
		for {
			select {
			case <-stop:
				worst <- w
				return
			default:
			}
			start := time.Now()
			time.Sleep(tick)
			w = max(w, time.Since(start)-tick)
		}
	}()
	f()
	close(stop)
	return <-worst
}
