package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/pubsub"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// wait is the generous bound for anything that should happen "soon": a
// message to arrive, a reconnect (whose backoff is capped at 1s) to succeed.
const wait = 10 * time.Second

// ---------------------------------------------------------------------------
// A fault-injecting backend: it wraps a real one, counts Subscribe calls,
// can make Subscribe fail, and can drop a live subscription the way a lost
// connection does (Handler.Dropped, then no more messages).

var errInjected = errors.New("injected fault")

type faultBackend struct {
	inner backend.Backend

	mu         sync.Mutex
	subscribes int
	failing    int   // fail this many more Subscribe calls; -1 fails them all
	failErr    error // what a failing Subscribe returns
	subs       []*faultSub
	// beforeSubscribe, when set, runs first in every Subscribe call, with
	// the call's ctx; n counts the calls from 1.
	beforeSubscribe func(ctx context.Context, n int)
	// beforeAdd and afterAdd, when set, run around every Add of every
	// subscription; n counts the Adds of that subscription from 1.
	beforeAdd func(s *faultSub, n int, channels []string)
	afterAdd  func(s *faultSub, n int, channels []string)
}

func (f *faultBackend) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	return f.inner.Eval(ctx, s, keys, args)
}

func (f *faultBackend) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	f.mu.Lock()
	f.subscribes++
	n, before := f.subscribes, f.beforeSubscribe
	f.mu.Unlock()
	if before != nil {
		before(ctx, n)
	}
	f.mu.Lock()
	if f.failing != 0 {
		if f.failing > 0 {
			f.failing--
		}
		err := f.failErr
		if err == nil {
			err = &backend.Error{Class: backend.ErrUnavailable, Cause: errInjected}
		}
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Unlock()
	s := &faultSub{f: f, h: h}
	inner, err := f.inner.Subscribe(ctx, backend.Handler{Message: s.message, Dropped: s.innerDropped})
	if err != nil {
		return nil, err
	}
	s.inner = inner
	f.mu.Lock()
	f.subs = append(f.subs, s)
	f.mu.Unlock()
	return s, nil
}

// fail makes the next n Subscribe calls fail with err (n < 0: all of them,
// until fail(0, nil)).
func (f *faultBackend) fail(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing, f.failErr = n, err
}

func (f *faultBackend) subscribeCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subscribes
}

// live returns the subscriptions neither dropped nor closed.
func (f *faultBackend) live() []*faultSub {
	f.mu.Lock()
	subs := slices.Clone(f.subs)
	f.mu.Unlock()
	var out []*faultSub
	for _, s := range subs {
		if s.alive() {
			out = append(out, s)
		}
	}
	return out
}

// dropLive drops the one live subscription.
func (f *faultBackend) dropLive(t *testing.T) {
	t.Helper()
	live := f.live()
	if len(live) != 1 {
		t.Fatalf("%d live subscriptions, want 1", len(live))
	}
	live[0].drop(&backend.Error{Class: backend.ErrUnavailable, Cause: errInjected})
}

type faultSub struct {
	f     *faultBackend
	h     backend.Handler
	inner backend.Subscription

	mu      sync.Mutex
	adds    int
	dropped bool
	closed  bool
}

func (s *faultSub) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.dropped && !s.closed
}

func (s *faultSub) message(m backend.Message) {
	s.mu.Lock()
	dead := s.dropped
	s.mu.Unlock()
	if !dead {
		s.h.Message(m)
	}
}

func (s *faultSub) innerDropped(err error) {
	s.mu.Lock()
	if s.dropped || s.closed {
		s.mu.Unlock()
		return
	}
	s.dropped = true
	s.mu.Unlock()
	s.h.Dropped(err)
}

// drop makes the subscription die like a lost connection: the inner one is
// closed (so that no message is delivered after this), then Dropped is
// called, once.
func (s *faultSub) drop(err error) {
	s.mu.Lock()
	if s.dropped || s.closed {
		s.mu.Unlock()
		return
	}
	s.dropped = true
	s.mu.Unlock()
	_ = s.inner.Close() // waits for the inner receive loop to end
	s.h.Dropped(err)
}

func (s *faultSub) errLocked() error {
	switch {
	case s.closed:
		return &backend.Error{Class: backend.ErrClosed}
	case s.dropped:
		return &backend.Error{Class: backend.ErrUnavailable, Cause: errInjected}
	}
	return nil
}

func (s *faultSub) Add(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	if err := s.errLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.adds++
	n := s.adds
	s.mu.Unlock()
	s.f.mu.Lock()
	before, after := s.f.beforeAdd, s.f.afterAdd
	s.f.mu.Unlock()
	if before != nil {
		before(s, n, channels)
	}
	if err := s.inner.Add(ctx, channels...); err != nil {
		return err
	}
	if after != nil {
		after(s, n, channels)
	}
	return nil
}

func (s *faultSub) Remove(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	err := s.errLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.inner.Remove(ctx, channels...)
}

func (s *faultSub) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.inner.Close()
}

// ---------------------------------------------------------------------------
// Test environment: miniredis, the go-redis adapter, the fault wrapper.

type env struct {
	m  *miniredis.Miniredis
	rc *redis.Client
	b  backend.Backend
	fb *faultBackend
}

func newEnv(t *testing.T) *env {
	t.Helper()
	checkLeaks(t) // registered first, so it runs after every other cleanup
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = rc.Close() })
	b := goredis.New(rc)
	return &env{m: m, rc: rc, b: b, fb: &faultBackend{inner: b}}
}

// hub makes a Hub of the env's fault backend that lingers linger, shut
// down (and its goroutines waited for) when the test ends.
func (e *env) hub(t *testing.T, linger time.Duration) *pubsub.Hub {
	t.Helper()
	h := pubsub.NewHub(e.fb, pubsub.WithLinger(linger))
	t.Cleanup(h.Shutdown)
	return h
}

// checkLeaks fails the test if goroutines it started are still running once
// it is over. A Hub's reconnect loop may sleep out its backoff (at most 1s)
// after the last waiter left, so this polls instead of checking once.
func checkLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left behind: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

var publishScript = backend.NewScript(`return redis.call('PUBLISH', ARGV[1], ARGV[2])`)

// publish sends payload on channel through the backend's script path and
// returns how many subscribers the server delivered it to.
func (e *env) publish(t *testing.T, channel, payload string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, err := e.b.Eval(ctx, publishScript, nil, []string{channel, payload})
	if err != nil {
		t.Fatalf("PUBLISH %s %s: %v", channel, payload, err)
	}
	return v.(int64)
}

// mustPublish publishes and fails unless exactly one connection (the Hub's)
// received it.
func (e *env) mustPublish(t *testing.T, channel, payload string) {
	t.Helper()
	if n := e.publish(t, channel, payload); n != 1 {
		t.Fatalf("PUBLISH %s %s reached %d subscribers, want 1", channel, payload, n)
	}
}

// sentinel is a waiter alone on its own channel, used as a barrier: the
// adapter delivers the messages of one connection in order, so once a
// message published on the sentinel's channel has woken it, every message
// published before has been handled.
type sentinel struct {
	e       *env
	w       *pubsub.Waiter
	channel string
}

func (e *env) sentinel(t *testing.T, h *pubsub.Hub) *sentinel {
	t.Helper()
	w := join(t, h, "sync")
	t.Cleanup(w.Leave)
	return &sentinel{e: e, w: w, channel: "sync"}
}

func (s *sentinel) flush(t *testing.T) {
	t.Helper()
	s.e.mustPublish(t, s.channel, "1")
	if !wokenWithin(s.w, wait) {
		t.Fatal("barrier message never arrived")
	}
}

func join(t *testing.T, h *pubsub.Hub, channels ...string) *pubsub.Waiter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	w, live := h.Join(ctx, channels...)
	if !live {
		w.Leave()
		t.Fatalf("Join(%v) not live", channels)
	}
	return w
}

func wokenWithin(w *pubsub.Waiter, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.C():
		return true
	case <-t.C:
		return false
	}
}

// pending reports (and consumes) a wake-up waiting for w.
func pending(w *pubsub.Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wokenSet(ws []*pubsub.Waiter) []bool {
	out := make([]bool, len(ws))
	for i, w := range ws {
		out[i] = pending(w)
	}
	return out
}

// ---------------------------------------------------------------------------

func TestWakeCount(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	ws := make([]*pubsub.Waiter, 5)
	for i := range ws {
		ws[i] = join(t, h, "ch")
		defer ws[i].Leave()
	}
	s := e.sentinel(t, h)
	// A waiter that has just joined has nothing to wake it yet: a Join that
	// returns live is followed by an attempt anyway.
	s.flush(t)
	if got := wokenSet(ws); slices.Contains(got, true) {
		t.Fatalf("woken before any release: %v", got)
	}

	t.Run("one, oldest first", func(t *testing.T) {
		e.mustPublish(t, "ch", "1")
		s.flush(t)
		if got, want := wokenSet(ws), []bool{true, false, false, false, false}; !slices.Equal(got, want) {
			t.Fatalf("woken = %v, want %v", got, want)
		}
		// Again: the oldest (whose wake-up was used) comes first again.
		e.mustPublish(t, "ch", "1")
		s.flush(t)
		if got, want := wokenSet(ws), []bool{true, false, false, false, false}; !slices.Equal(got, want) {
			t.Fatalf("woken = %v, want %v", got, want)
		}
	})
	t.Run("a pending wake-up is not doubled", func(t *testing.T) {
		e.mustPublish(t, "ch", "1")
		e.mustPublish(t, "ch", "1")
		s.flush(t)
		if got, want := wokenSet(ws), []bool{true, true, false, false, false}; !slices.Equal(got, want) {
			t.Fatalf("woken = %v, want %v", got, want)
		}
	})
	t.Run("three", func(t *testing.T) {
		e.mustPublish(t, "ch", "3")
		s.flush(t)
		if got, want := wokenSet(ws), []bool{true, true, true, false, false}; !slices.Equal(got, want) {
			t.Fatalf("woken = %v, want %v", got, want)
		}
	})
	for _, payload := range []string{pubsub.WakeAll, "all", "", "0", "-2", "99"} {
		t.Run(fmt.Sprintf("all on %q", payload), func(t *testing.T) {
			e.mustPublish(t, "ch", payload)
			s.flush(t)
			if got := wokenSet(ws); slices.Contains(got, false) {
				t.Fatalf("woken = %v, want all", got)
			}
		})
	}
	t.Run("other channel", func(t *testing.T) {
		if n := e.publish(t, "elsewhere", "*"); n != 0 {
			t.Fatalf("a channel nobody waits on has %d subscribers", n)
		}
		s.flush(t)
		if got := wokenSet(ws); slices.Contains(got, true) {
			t.Fatalf("woken = %v by a message on another channel", got)
		}
	})
}

func TestMultiChannelWaiter(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	s := e.sentinel(t, h)
	w := join(t, h, "a", "b")
	defer w.Leave()
	for _, ch := range []string{"a", "b"} {
		e.mustPublish(t, ch, "1")
		s.flush(t)
		if !pending(w) {
			t.Fatalf("a message on %s did not wake a waiter on a and b", ch)
		}
	}
}

func TestLeaveHandsOnWake(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	s := e.sentinel(t, h)
	a, b, c := join(t, h, "ch"), join(t, h, "ch"), join(t, h, "ch")
	defer b.Leave()
	defer c.Leave()

	e.mustPublish(t, "ch", "1")
	s.flush(t)
	// a got the wake-up and leaves without using it: b must get it.
	a.Leave()
	a.Leave() // idempotent: nothing handed on twice
	if got, want := wokenSet([]*pubsub.Waiter{b, c}), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("after an unused wake-up was left: woken = %v, want %v", got, want)
	}

	// A wake-up that was used is not handed on.
	e.mustPublish(t, "ch", "1")
	s.flush(t)
	if !pending(b) {
		t.Fatal("b not woken")
	}
	b.Leave()
	if pending(c) {
		t.Fatal("a used wake-up was handed on")
	}
}

func TestRefCounting(t *testing.T) {
	e := newEnv(t)
	e.publish(t, "warmup", "") // open the client's own connection first
	base := e.m.CurrentConnectionCount()

	h := e.hub(t, 0)
	a := join(t, h, "ch")
	b := join(t, h, "ch")
	other := join(t, h, "other")
	if got := e.m.PubSubChannels(""); !slices.Equal(got, []string{"ch", "other"}) {
		t.Fatalf("server channels = %v", got)
	}
	if n := e.m.CurrentConnectionCount(); n != base+1 {
		t.Fatalf("%d connections, want %d: one subscription for all channels", n, base+1)
	}

	// One of two waiters leaves: still subscribed.
	a.Leave()
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(b, wait) {
		t.Fatal("the remaining waiter was not woken")
	}
	// The last leaves: unsubscribed, the connection stays for "other".
	b.Leave()
	eventually(t, "ch unsubscribed", func() bool {
		return slices.Equal(e.m.PubSubChannels(""), []string{"other"})
	})
	if n := e.m.CurrentConnectionCount(); n != base+1 {
		t.Fatalf("%d connections, want %d", n, base+1)
	}
	e.mustPublish(t, "other", "1")
	if !wokenWithin(other, wait) {
		t.Fatal("the waiter on the remaining channel was not woken")
	}

	// No channel left: the connection is closed, though the Hub lives on.
	other.Leave()
	eventually(t, "the subscription connection closed", func() bool {
		return e.m.CurrentConnectionCount() == base && len(e.m.PubSubChannels("")) == 0
	})
	if n := len(e.fb.live()); n != 0 {
		t.Fatalf("%d live subscriptions on an idle Hub, want 0", n)
	}
	if e.fb.subscribeCalls() != 1 {
		t.Fatalf("%d Subscribe calls, want 1", e.fb.subscribeCalls())
	}

	// A new waiter on the same Hub brings a new subscription.
	w := join(t, h, "ch")
	if n := e.fb.subscribeCalls(); n != 2 {
		t.Fatalf("%d Subscribe calls, want 2: an idle Hub reconnects for a new waiter", n)
	}
	if n := e.m.CurrentConnectionCount(); n != base+1 {
		t.Fatalf("%d connections, want %d", n, base+1)
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("not woken after resubscribing")
	}
	w.Leave()
	eventually(t, "closed again", func() bool { return e.m.CurrentConnectionCount() == base })
}

func TestOneSubscriptionForManyWaiters(t *testing.T) {
	e := newEnv(t)
	const waiters, channels = 200, 50
	h := e.hub(t, 0)
	ws := make([]*pubsub.Waiter, waiters)
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	start := make(chan struct{})
	for i := range waiters {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			w, live := h.Join(ctx, fmt.Sprintf("ch%d", i%channels))
			ws[i] = w
			if !live {
				errs <- fmt.Errorf("waiter %d not live", i)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Errorf("%d Subscribe calls for %d waiters, want 1", n, waiters)
	}
	if n := len(e.m.PubSubChannels("")); n != channels {
		t.Errorf("%d channels subscribed, want %d", n, channels)
	}
	for c := range channels {
		e.mustPublish(t, fmt.Sprintf("ch%d", c), pubsub.WakeAll)
	}
	for i, w := range ws {
		if !wokenWithin(w, wait) {
			t.Fatalf("waiter %d not woken", i)
		}
	}
	for _, w := range ws {
		wg.Go(w.Leave)
	}
	wg.Wait()
	eventually(t, "everything unsubscribed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Errorf("%d Subscribe calls, want 1", n)
	}
}

func TestDropWakesAndReconnects(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	a, b := join(t, h, "ch"), join(t, h, "ch")
	defer a.Leave()
	defer b.Leave()

	// Keep the server unreachable for now, then lose the connection.
	e.fb.fail(-1, nil)
	e.fb.dropLive(t)
	if !pending(a) || !pending(b) {
		t.Fatal("a dropped subscription must wake every waiter")
	}
	if a.Live() || b.Live() {
		t.Fatal("Live while the subscription is down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	c, live := h.Join(ctx, "ch")
	cancel()
	defer c.Leave()
	if live {
		t.Fatal("Join reported live while the server is unreachable")
	}
	eventually(t, "several reconnect attempts", func() bool { return e.fb.subscribeCalls() >= 4 })
	if a.Live() {
		t.Fatal("Live while the subscription is down")
	}

	// The server is back: the Hub resubscribes by itself.
	e.fb.fail(0, nil)
	eventually(t, "resubscribed", func() bool { return a.Live() && b.Live() && c.Live() })
	// Everyone is told to retry, since a release may have been missed.
	for i, w := range []*pubsub.Waiter{a, b, c} {
		if !wokenWithin(w, wait) {
			t.Fatalf("waiter %d not woken on reconnect", i)
		}
	}
	// The dropped connection is closed; the server may not have reaped it
	// yet.
	eventually(t, "one subscriber on ch", func() bool { return e.m.PubSubNumSub("ch")["ch"] == 1 })
	if n := len(e.fb.live()); n != 1 {
		t.Fatalf("%d live subscriptions, want 1", n)
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(a, wait) {
		t.Fatal("not woken by a message after reconnecting")
	}
	if pending(b) || pending(c) {
		t.Fatal(`"1" woke more than one waiter after reconnecting`)
	}
}

func TestSubscribeFailsThenRecovers(t *testing.T) {
	e := newEnv(t)
	e.fb.fail(3, nil)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	w, live := h.Join(ctx, "ch")
	cancel()
	defer w.Leave()
	if live {
		t.Fatal("Join live although Subscribe failed")
	}
	// The waiter polls; it is woken once the Hub is subscribed.
	if !wokenWithin(w, wait) {
		t.Fatal("not woken when the subscription came up")
	}
	if !w.Live() {
		t.Fatal("not live after recovering")
	}
	if n := e.fb.subscribeCalls(); n != 4 {
		t.Fatalf("%d Subscribe calls, want 4 (3 failures, 1 success)", n)
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("not woken by a message")
	}
}

func TestClosedBackendStopsReconnecting(t *testing.T) {
	for _, real := range []bool{false, true} {
		t.Run(fmt.Sprintf("real client closed %v", real), func(t *testing.T) {
			e := newEnv(t)
			h := e.hub(t, 0)
			w := join(t, h, "ch")
			if real {
				// Closing the client ends its pub/sub connection too, which
				// may or may not have been reported yet.
				_ = e.rc.Close()
				for _, s := range e.fb.live() {
					s.drop(&backend.Error{Class: backend.ErrUnavailable, Cause: errInjected})
				}
			} else {
				e.fb.fail(-1, &backend.Error{Class: backend.ErrClosed})
				e.fb.dropLive(t)
			}
			eventually(t, "a reconnect attempt", func() bool { return e.fb.subscribeCalls() == 2 })
			// Several backoff periods (10ms, 20ms, 40ms, ...) pass: no retry.
			time.Sleep(300 * time.Millisecond)
			if n := e.fb.subscribeCalls(); n != 2 {
				t.Fatalf("%d Subscribe calls: a closed backend must stop the reconnect loop", n)
			}
			if w.Live() {
				t.Fatal("live on a closed backend")
			}
			// The waiter is still told to poll and can leave; nothing is
			// left running for it.
			w.Leave()
			// The Hub stays usable: a later waiter makes it try once more,
			// is told to poll, and the closed backend stops it again.
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			w2, live := h.Join(ctx, "ch")
			cancel()
			defer w2.Leave()
			if live {
				t.Fatal("a later Join live on a closed backend")
			}
			if n := e.fb.subscribeCalls(); n != 3 {
				t.Fatalf("%d Subscribe calls, want 3: one more for the later waiter", n)
			}
			time.Sleep(300 * time.Millisecond)
			if n := e.fb.subscribeCalls(); n != 3 {
				t.Fatalf("%d Subscribe calls: a closed backend must stop the reconnect loop of a later waiter too", n)
			}
			if n := len(e.fb.live()); n != 0 {
				t.Fatalf("%d live subscriptions on a closed backend", n)
			}
		})
	}
}

func TestDropWhileDialing(t *testing.T) {
	// The connection is lost right after the server confirmed the
	// subscription, before the Hub has installed it: the Hub must not keep
	// a dead subscription and believe it live.
	e := newEnv(t)
	var once sync.Once
	e.fb.afterAdd = func(s *faultSub, n int, _ []string) {
		if n == 1 {
			once.Do(func() { s.drop(&backend.Error{Class: backend.ErrUnavailable, Cause: errInjected}) })
		}
	}
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	w, _ := h.Join(ctx, "ch")
	cancel()
	defer w.Leave()
	eventually(t, "a live subscription", func() bool { return w.Live() && len(e.fb.live()) == 1 })
	eventually(t, "the dropped connection reaped", func() bool { return e.m.PubSubNumSub("ch")["ch"] == 1 })
	for pending(w) {
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("not woken")
	}
}

func TestLiveWaitsForTheChannel(t *testing.T) {
	// The Hub is up, but the SUBSCRIBE of a new channel is slow: a waiter
	// that stopped waiting for it must not be told it is live (it would
	// sleep for the holder's whole TTL on a channel nobody listens to), and
	// it is woken once the channel is subscribed.
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	anchor := join(t, h, "anchor")
	defer anchor.Leave()

	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // also when the test fails
	e.fb.mu.Lock()
	e.fb.beforeAdd = func(_ *faultSub, _ int, channels []string) {
		if slices.Contains(channels, "slow") {
			<-release
		}
	}
	e.fb.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	w, live := h.Join(ctx, "slow")
	cancel()
	defer w.Leave()
	if live {
		t.Fatal("Join live before the channel was subscribed")
	}
	if w.Live() {
		t.Fatal("Live before the channel was subscribed")
	}
	if !anchor.Live() {
		t.Fatal("the other channel stopped being live")
	}
	open()
	if !wokenWithin(w, wait) {
		t.Fatal("not woken once the channel was subscribed")
	}
	if !w.Live() {
		t.Fatal("not live once subscribed")
	}
	e.mustPublish(t, "slow", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("not woken by a message")
	}
}

func TestLeaveRejoin(t *testing.T) {
	for _, anchored := range []bool{true, false} {
		t.Run(fmt.Sprintf("anchored %v", anchored), func(t *testing.T) {
			e := newEnv(t)
			h := e.hub(t, 0)
			if anchored {
				// Another channel keeps the connection open, so that the
				// churn is all SUBSCRIBE/UNSUBSCRIBE on one connection;
				// without it, the churn closes and reopens the Hub's
				// connection too.
				a := join(t, h, "anchor")
				defer a.Leave()
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			for i := range 300 {
				if i%2 == 0 {
					// Do not even wait for the subscription.
					w, _ := h.Join(done, "ch")
					w.Leave()
				} else {
					join(t, h, "ch").Leave()
				}
			}
			w := join(t, h, "ch")
			defer w.Leave()
			// Connections the churn closed may not have been reaped by the
			// server yet; none may stay subscribed.
			eventually(t, "one subscriber on ch", func() bool {
				return e.m.PubSubNumSub("ch")["ch"] == 1
			})
			e.mustPublish(t, "ch", "1")
			if !wokenWithin(w, wait) {
				t.Fatal("not woken after leave-and-rejoin churn")
			}
			if n := len(e.fb.live()); n != 1 {
				t.Fatalf("%d live subscriptions, want 1", n)
			}
		})
	}
}

func TestLeaveRejoinConcurrent(t *testing.T) {
	e := newEnv(t)
	h := e.hub(t, 0)
	keep := join(t, h, "keep")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			done, cancel := context.WithCancel(context.Background())
			cancel()
			for range 100 {
				w, _ := h.Join(done, "ch", fmt.Sprintf("g%d", g))
				w.Leave()
			}
		})
	}
	wg.Wait()
	w := join(t, h, "ch")
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("not woken after concurrent churn")
	}
	w.Leave()
	eventually(t, "only keep subscribed", func() bool {
		return slices.Equal(e.m.PubSubChannels(""), []string{"keep"})
	})
	keep.Leave()
	eventually(t, "nothing subscribed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
}

func TestLeaveWhileDialingUnsubscribes(t *testing.T) {
	// A channel whose last waiter leaves while the Hub is still dialing
	// must not stay subscribed on the server.
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	// The first Subscribe waits until both waiters joined, and fails: the
	// second dial is sure to subscribe both channels at once.
	joined := make(chan struct{})
	e.fb.beforeSubscribe = func(_ context.Context, n int) {
		if n == 1 {
			<-joined
		}
	}
	e.fb.fail(1, nil)
	entered := make(chan []string, 1)
	release := make(chan struct{})
	e.fb.beforeAdd = func(_ *faultSub, n int, channels []string) {
		if n == 1 {
			entered <- channels
			<-release
		}
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	keep, _ := h.Join(done, "keep")
	defer keep.Leave()
	gone, _ := h.Join(done, "gone")
	close(joined)
	// The SUBSCRIBE of both channels is on its way.
	if got := <-entered; len(got) != 2 {
		t.Fatalf("first SUBSCRIBE of %v, want keep and gone", got)
	}
	gone.Leave()
	close(release)
	eventually(t, "keep live", keep.Live)
	eventually(t, "gone unsubscribed", func() bool {
		return slices.Equal(e.m.PubSubChannels(""), []string{"keep"})
	})
}

func TestCloseHub(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	a := join(t, h, "ch")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if !pending(a) {
		t.Fatal("Close must wake the waiters")
	}
	if a.Live() {
		t.Fatal("live after Close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	b, live := h.Join(ctx, "ch")
	if live {
		t.Fatal("Join live on a closed Hub")
	}
	a.Leave()
	b.Leave()
	eventually(t, "the connection closed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Fatalf("%d Subscribe calls, want 1", n)
	}
}

func TestShutdownLeavesNoGoroutine(t *testing.T) {
	// Shutdown closes the Hub and waits for every goroutine it started,
	// however long they take to notice: once it returns, nothing of the
	// Hub runs. Two Hubs are shut down: one with waiters on a live
	// subscription and a SUBSCRIBE in flight (its work loop), and one whose
	// server refuses connections (its connect loop, retrying).
	const giveUp = time.Second // longer than goleak's own retries (~0.5s)
	e := newEnv(t)
	e.publish(t, "warmup", "") // open the client's own connection first
	ignore := goleak.IgnoreCurrent()

	// The live Hub. The server answers the SUBSCRIBE of "slow" only once
	// the subscription is closed.
	up := pubsub.NewHub(e.fb)
	a, b := join(t, up, "ch"), join(t, up, "ch")
	defer a.Leave()
	defer b.Leave()
	adding := make(chan struct{}, 1)
	e.fb.mu.Lock()
	e.fb.beforeAdd = func(s *faultSub, _ int, channels []string) {
		if !slices.Contains(channels, "slow") {
			return
		}
		adding <- struct{}{}
		for s.alive() {
			time.Sleep(time.Millisecond)
		}
	}
	e.fb.mu.Unlock()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	slow, _ := up.Join(done, "slow")
	defer slow.Leave()
	select {
	case <-adding:
	case <-time.After(wait):
		t.Fatal("the SUBSCRIBE of slow never started")
	}

	// The Hub of a server that refuses connections: its connect loop
	// retries with backoff, and from the third try on a dial hangs until
	// cancelled, then takes giveUp to give up.
	down := &faultBackend{inner: e.b}
	down.fail(-1, nil)
	dialing := make(chan int, 1)
	down.beforeSubscribe = func(ctx context.Context, n int) {
		if n < 3 {
			return
		}
		select {
		case dialing <- n:
		default:
		}
		<-ctx.Done()
		time.Sleep(giveUp)
	}
	dh := pubsub.NewHub(down)
	jctx, jcancel := context.WithTimeout(context.Background(), wait)
	w, live := dh.Join(jctx, "ch")
	jcancel()
	defer w.Leave()
	if live {
		t.Fatal("Join live on a server that refuses connections")
	}
	select {
	case <-dialing:
	case <-time.After(wait):
		t.Fatalf("no third dial (%d Subscribe calls)", down.subscribeCalls())
	}

	up.Shutdown()
	dh.Shutdown()
	if !pending(a) || !pending(b) || !pending(w) {
		t.Fatal("Shutdown must wake the waiters")
	}
	if a.Live() || slow.Live() || w.Live() {
		t.Fatal("live after Shutdown")
	}
	goleak.VerifyNone(t, ignore)
	// Leaving a shut-down Hub starts nothing either.
	a.Leave()
	b.Leave()
	slow.Leave()
	w.Leave()
	goleak.VerifyNone(t, ignore)
}

func TestJoinWaitsForItsOwnSubscribe(t *testing.T) {
	// A SUBSCRIBE for a channel is in flight when its last waiter leaves and
	// a new one joins: the queue then holds UNSUBSCRIBE, SUBSCRIBE. The new
	// waiter's Join must wait for that second SUBSCRIBE, not take the
	// confirmation of the first (after which the UNSUBSCRIBE still runs).
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	anchor := join(t, h, "anchor")
	defer anchor.Leave()

	entered := make(chan int, 2)
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var once0, once1 sync.Once
	open0 := func() { once0.Do(func() { close(gates[0]) }) }
	open1 := func() { once1.Do(func() { close(gates[1]) }) }
	defer open1()
	defer open0()
	var mu sync.Mutex
	seen := 0
	e.fb.mu.Lock()
	e.fb.beforeAdd = func(_ *faultSub, _ int, channels []string) {
		if !slices.Contains(channels, "ch") {
			return
		}
		mu.Lock()
		i := seen
		seen++
		mu.Unlock()
		if i < len(gates) {
			entered <- i
			<-gates[i]
		}
	}
	e.fb.mu.Unlock()

	done, cancel := context.WithCancel(context.Background())
	cancel()
	w1, _ := h.Join(done, "ch")
	if i := <-entered; i != 0 {
		t.Fatalf("entered SUBSCRIBE %d", i)
	}
	w1.Leave()                  // UNSUBSCRIBE ch queued behind the SUBSCRIBE in flight
	w2, _ := h.Join(done, "ch") // SUBSCRIBE ch queued after the UNSUBSCRIBE
	defer w2.Leave()
	open0()
	if i := <-entered; i != 1 {
		t.Fatalf("entered SUBSCRIBE %d", i)
	}
	// The UNSUBSCRIBE has run, the second SUBSCRIBE waits: ch is not
	// subscribed, so nobody may be told it is live.
	if got := e.m.PubSubChannels(""); !slices.Equal(got, []string{"anchor"}) {
		t.Fatalf("server channels = %v, want only anchor", got)
	}
	if w2.Live() {
		t.Fatal("Live while ch is not subscribed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	w3, live := h.Join(ctx, "ch")
	cancel()
	defer w3.Leave()
	if live {
		t.Fatalf("Join returned live while ch is not subscribed (publish reaches %d)", e.publish(t, "ch", "1"))
	}
	open1()
	eventually(t, "live once subscribed", func() bool { return w2.Live() && w3.Live() })
	for pending(w2) || pending(w3) {
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w2, wait) {
		t.Fatal("not woken")
	}
}

func TestLingerKeepsTheSubscription(t *testing.T) {
	// A process that waits, holds and waits again must not pay a
	// SUBSCRIBE, let alone a new connection, for every wait: the channel
	// stays subscribed for the linger period after its last waiter left.
	e := newEnv(t)
	e.publish(t, "warmup", "")
	base := e.m.CurrentConnectionCount()
	const linger = 300 * time.Millisecond
	h := e.hub(t, linger)

	w := join(t, h, "ch")
	w.Leave()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		w, live := h.Join(ctx, "ch")
		cancel()
		if !live {
			t.Fatal("a rejoin of a lingering channel is not live")
		}
		w.Leave()
	}
	if n := e.fb.subscribeCalls(); n != 1 {
		t.Fatalf("%d Subscribe calls for 21 waits, want 1", n)
	}
	if got := e.m.PubSubChannels(""); !slices.Equal(got, []string{"ch"}) {
		t.Fatalf("server channels while lingering = %v, want [ch]", got)
	}
	// While the channel lingers, its connection stays open.
	if n := e.m.CurrentConnectionCount(); n != base+1 {
		t.Fatalf("%d connections while lingering, want %d", n, base+1)
	}
	if n := len(e.fb.live()); n != 1 {
		t.Fatalf("%d live subscriptions while lingering, want 1", n)
	}
	// A rejoined waiter is woken as usual.
	w = join(t, h, "ch")
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("a waiter on a lingering channel was not woken")
	}
	w.Leave()

	// Past the linger period: unsubscribed, the connection closed.
	eventually(t, "the lingering subscription closed", func() bool {
		return e.m.CurrentConnectionCount() == base && len(e.m.PubSubChannels("")) == 0
	})
	if n := len(e.fb.live()); n != 0 {
		t.Fatalf("%d live subscriptions after lingering, want 0", n)
	}
	// The Hub lives on: a later waiter subscribes again and is woken.
	w = join(t, h, "ch")
	if n := e.fb.subscribeCalls(); n != 2 {
		t.Fatalf("%d Subscribe calls, want 2: a new subscription once the last one lingered away", n)
	}
	e.mustPublish(t, "ch", "1")
	if !wokenWithin(w, wait) {
		t.Fatal("a waiter on a resubscribed channel was not woken")
	}
	w.Leave()
	eventually(t, "the new subscription closed after lingering", func() bool {
		return e.m.CurrentConnectionCount() == base && len(e.fb.live()) == 0
	})
}

func TestLingerPerChannel(t *testing.T) {
	// A channel that lingers past the period is unsubscribed while another
	// keeps its waiter, and the connection stays for it.
	e := newEnv(t)
	h := e.hub(t, 100*time.Millisecond)
	keep := join(t, h, "keep")
	join(t, h, "gone").Leave()
	eventually(t, "gone unsubscribed", func() bool {
		return slices.Equal(e.m.PubSubChannels(""), []string{"keep"})
	})
	e.mustPublish(t, "keep", "1")
	if !wokenWithin(keep, wait) {
		t.Fatal("the remaining waiter was not woken")
	}
	keep.Leave()
	eventually(t, "nothing subscribed", func() bool { return len(e.m.PubSubChannels("")) == 0 })
}

func TestTargetedWake(t *testing.T) {
	// A release that handed the primitive to one waiter wakes that waiter
	// only: not the oldest, not one per process.
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	other := pubsub.NewHub(e.fb) // a second process's Hub
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var ws []*pubsub.Waiter
	for _, id := range []string{"a", "b", ""} {
		w, live := h.JoinAs(ctx, id, "ch")
		if !live {
			t.Fatal("not live")
		}
		defer w.Leave()
		ws = append(ws, w)
	}
	x, live := other.JoinAs(ctx, "x", "ch")
	if !live {
		t.Fatal("not live")
	}
	defer x.Leave()

	e.publish(t, "ch", pubsub.Target("b"))
	if !wokenWithin(ws[1], wait) {
		t.Fatal("the targeted waiter was not woken")
	}
	time.Sleep(50 * time.Millisecond) // time for a wrong wake-up to arrive
	if got := []bool{pending(ws[0]), pending(ws[2]), pending(x)}; !slices.Equal(got, []bool{false, false, false}) {
		t.Fatalf("untargeted waiters woken (a, anonymous, other process) = %v", got)
	}
	// A target nobody has wakes nobody; a count still wakes the oldest.
	e.publish(t, "ch", pubsub.Target("zzz"))
	e.publish(t, "ch", "1")
	if !wokenWithin(ws[0], wait) || !wokenWithin(x, wait) {
		t.Fatal("a count message did not wake the oldest waiter of each Hub")
	}
	time.Sleep(50 * time.Millisecond)
	if pending(ws[1]) || pending(ws[2]) {
		t.Fatal("a target nobody has, or a count of 1, woke more than the oldest")
	}
}

// TestTargetDetails: what follows a target's id in a message, past a
// space, is handed to that waiter alone (Handed, once), and the id before
// the space is what selects the waiter.
func TestTargetDetails(t *testing.T) {
	const wait = 2 * time.Second
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a, live := h.JoinAs(ctx, "a", "ch")
	if !live {
		t.Fatal("not live")
	}
	defer a.Leave()
	b, _ := h.JoinAs(ctx, "b", "ch")
	defer b.Leave()

	e.publish(t, "ch", pubsub.Target("b")+" 42 3000")
	if !wokenWithin(b, wait) {
		t.Fatal("the targeted waiter was not woken")
	}
	if got := b.Handed(); got != "42 3000" {
		t.Fatalf("Handed() = %q, want %q", got, "42 3000")
	}
	if got := b.Handed(); got != "" {
		t.Fatalf("Handed() again = %q, want it taken", got)
	}
	if pending(a) || a.Handed() != "" {
		t.Fatal("another waiter heard the details")
	}
	e.publish(t, "ch", pubsub.Target("a"))
	if !wokenWithin(a, wait) || a.Handed() != "" {
		t.Fatal("a target without details: woken, nothing handed")
	}
}

func TestInbox(t *testing.T) {
	e1, e2 := newEnv(t), newEnv(t)
	a, b := pubsub.Inbox(e1.b, "rel"), pubsub.Inbox(e2.b, "rel")
	if a != pubsub.Inbox(e1.b, "rel") {
		t.Fatal("a backend's inbox changed between calls")
	}
	if a == b {
		t.Fatalf("two backends share the inbox %q: a hand-over would reach both", a)
	}
	if !strings.HasPrefix(a, "rel:to:") {
		t.Fatalf("inbox %q is not under its release channel", a)
	}
}

// TestBoundCallTimeout goes past WithCallTimeout: against a server that
// accepts connections and never answers, each subscription attempt ends at
// the call timeout (here 150 ms; a Client's Hub uses 1 s, the default is
// 5 s) and is tried again after the backoff, and Shutdown ends the attempt
// in flight within the timeout, although the driver (go-redis with
// ContextTimeoutEnabled) ignores a cancellation once its call is sent.
func TestBoundCallTimeout(t *testing.T) {
	checkLeaks(t)
	const timeout = 150 * time.Millisecond
	rc := redis.NewClient(&redis.Options{Addr: redistest.SilentAddr(t), ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	tb := &timedBackend{Backend: goredis.New(rc)}
	h := pubsub.NewHub(tb, pubsub.WithCallTimeout(timeout))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	w, live := h.Join(ctx, "ch")
	cancel()
	if live {
		t.Fatal("live on a server that never answers")
	}
	eventually(t, "three subscription attempts", func() bool { return len(tb.calls()) >= 3 })
	w.Leave()
	start := time.Now()
	h.Shutdown()
	if d := time.Since(start); d > timeout+100*time.Millisecond {
		t.Errorf("Shutdown took %v with a call in flight on a silent server, want at most the call timeout %v", d.Round(time.Millisecond), timeout)
	}
	for i, d := range tb.calls() {
		if d > timeout+100*time.Millisecond {
			t.Errorf("subscription attempt %d ended after %v, want about %v", i+1, d.Round(time.Millisecond), timeout)
		}
	}
}

// timedBackend records how long each Subscribe call took.
type timedBackend struct {
	backend.Backend
	mu   sync.Mutex
	took []time.Duration
}

func (b *timedBackend) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	start := time.Now()
	s, err := b.Backend.Subscribe(ctx, h)
	b.mu.Lock()
	b.took = append(b.took, time.Since(start))
	b.mu.Unlock()
	return s, err
}

func (b *timedBackend) calls() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.took)
}

// TestListenerToldOfAHealedDrop: a subscription that drops and is up again
// before the listener looks (its goroutine was not scheduled meanwhile)
// still tells the listener that messages may have been lost.
func TestListenerToldOfAHealedDrop(t *testing.T) {
	e := newEnv(t)
	h := pubsub.NewHub(e.fb)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	w, live := h.Listen(ctx, func(string, string) {}, "ch")
	defer w.Leave()
	if !live {
		t.Fatal("Listen not live")
	}
	if w.Dropped() {
		t.Fatal("Dropped before any drop")
	}
	e.fb.dropLive(t)
	eventually(t, "resubscribed", w.Live)
	if !w.Dropped() {
		t.Fatal("a drop healed before the listener looked went untold")
	}
	if w.Dropped() {
		t.Fatal("Dropped told the same drop twice")
	}
}
