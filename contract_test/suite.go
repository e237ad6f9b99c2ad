package contracttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// Run runs the whole suite against h: first the backend contract itself,
// then every primitive through its public API.
func Run(t *testing.T, h Harness) {
	t.Run("Backend", func(t *testing.T) { RunBackend(t, h) })
	t.Run("Batch", func(t *testing.T) { RunBatch(t, h) })
	t.Run("Mutex", func(t *testing.T) { RunMutex(t, h) })
	t.Run("HandOver", func(t *testing.T) { RunHandOver(t, h) })
	t.Run("GiveUp", func(t *testing.T) { RunGiveUp(t, h) })
	t.Run("ReentrantMutex", func(t *testing.T) { RunReentrant(t, h) })
	t.Run("Semaphore", func(t *testing.T) { RunSemaphore(t, h) })
	t.Run("RWLock", func(t *testing.T) { RunRWLock(t, h) })
	t.Run("Fair", func(t *testing.T) { RunFair(t, h) })
	t.Run("MultiLock", func(t *testing.T) { RunMultiLock(t, h) })
	t.Run("ReplicaAck", func(t *testing.T) { RunReplicaAck(t, h) })
	t.Run("Holder", func(t *testing.T) { RunHolder(t, h) })
}

// step is one named subtest.
type step struct {
	name string
	fn   func(t *testing.T, h Harness)
}

func runSteps(t *testing.T, h Harness, steps []step) {
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.fn(t, h) })
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
// Mutex's lock key; see primitives.Layout for the others).
func keyOf(p, name string) string { return primitives.KeyBase(p, name) }

// advance moves the server clock by d, or sleeps when it cannot.
func advance(t testing.TB, h Harness, d time.Duration) {
	if !h.AdvanceClock(t, d) {
		time.Sleep(d)
	}
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

// RunBackend checks the driver contract of backend.Backend.
func RunBackend(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"Values", testValues},
		{"NoScriptFallback", testNoScript},
		{"ScriptErrors", testScriptErrors},
		{"ContextDone", testContextDone},
		{"Unreachable", testUnreachable},
		{"Closed", testClosed},
		{"SubscribeDelivers", testSubscribe},
		{"SubscriptionDropped", testSubscriptionDropped},
	})
}

func testValues(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	cases := []struct {
		src  string
		want backend.Value
	}{
		{`return 42`, int64(42)},
		{`return -7`, int64(-7)},
		{`return 3.9`, int64(3)}, // Redis truncates Lua numbers
		{`return 'hi'`, "hi"},
		{`return ''`, ""},
		{`return nil`, nil},
		{`return false`, nil},
		{`return true`, int64(1)},
		{`return redis.call('GET', KEYS[1])`, nil},
		{`return {ok='FINE'}`, "FINE"},
		{`return {}`, []backend.Value{}},
		{`return {1, 'a', {2, {'b'}}}`, []backend.Value{int64(1), "a", []backend.Value{int64(2), []backend.Value{"b"}}}},
		{`return {1, nil, 3}`, []backend.Value{int64(1)}}, // a Lua array ends at its first nil
	}
	for _, c := range cases {
		v, err := b.Eval(ctx, backend.NewScript(c.src), []string{prefix(t) + "missing"}, nil)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if fmt.Sprintf("%#v", v) != fmt.Sprintf("%#v", c.want) {
			t.Errorf("%s = %#v, want %#v", c.src, v, c.want)
		}
	}
	// Arguments arrive as strings, binary-safe.
	v, err := b.Eval(ctx, backend.NewScript(`return ARGV[1] .. '|' .. #ARGV[2]`), nil, []string{"x y", "\x00\xff"})
	if err != nil || v != "x y|2" {
		t.Errorf("args: %#v, %v", v, err)
	}
}

func testNoScript(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	// A script the server has never seen: EVALSHA answers NOSCRIPT, and
	// the backend must fall back to EVAL.
	src := fmt.Sprintf("return '%s'", newID())
	s := backend.NewScript(src)
	for i := 0; i < 2; i++ {
		v, err := b.Eval(ctx, s, nil, nil)
		if err != nil || v != strings.Split(src, "'")[1] {
			t.Fatalf("run %d: %#v, %v", i, v, err)
		}
	}
}

func testScriptErrors(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	var re *backend.ReplyError
	_, err := b.Eval(ctx, backend.NewScript(`return redis.error_reply('MYERR went wrong')`), nil, nil)
	if !errors.As(err, &re) || !strings.Contains(re.Msg, "MYERR went wrong") {
		t.Errorf("error_reply: %v, want a *ReplyError with the message", err)
	}
	_, err = b.Eval(ctx, backend.NewScript(`error('boom')`), nil, nil)
	if !errors.As(err, &re) {
		t.Errorf("lua error: %v, want a *ReplyError", err)
	}
	key := prefix(t) + "h"
	do(t, b, "HSET", key, "f", "v")
	_, err = b.Eval(ctx, backend.NewScript(`return redis.call('GET', KEYS[1])`), []string{key}, nil)
	if !errors.Is(err, backend.ErrWrongType) {
		t.Errorf("GET on a hash: %v, want ErrWrongType", err)
	}
	if errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("an error reply must not read as ErrUnavailable: %v", err)
	}
	// The connection stays usable after an error reply.
	if v, err := b.Eval(ctx, backend.NewScript(`return 1`), nil, nil); err != nil || v != int64(1) {
		t.Errorf("after errors: %#v, %v", v, err)
	}
}

func testContextDone(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Eval(ctx, backend.NewScript(`return 1`), nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = b.Eval(ctx, backend.NewScript(`return 1`), nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("expired ctx: %v, want context.DeadlineExceeded", err)
	}
	_, err = b.Subscribe(ctx, backend.Handler{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("subscribe with expired ctx: %v, want context.DeadlineExceeded", err)
	}
}

func testUnreachable(t *testing.T, h Harness) {
	b := h.Unreachable(t)
	ctx := ctxT(t, 5*time.Second)
	start := time.Now()
	_, err := b.Eval(ctx, backend.NewScript(`return 1`), nil, nil)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("eval: %v, want ErrUnavailable", err)
	}
	if _, err := b.Subscribe(ctx, backend.Handler{}); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("subscribe: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("failing took %v", d)
	}
	// Through a primitive: the error says what failed and still matches.
	mu, err := primitives.NewMutex(b, "m", primitives.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mu.TryLock(ctx)
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), `"m"`) {
		t.Errorf("TryLock: %v, want ErrUnavailable naming the mutex", err)
	}
	// A waiting Lock rides out unavailability until its context ends (it
	// also matches ErrUnavailable when its last attempt was refused rather
	// than cut short by the deadline).
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = mu.Lock(lctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock: %v, want DeadlineExceeded", err)
	}
	t.Logf("Lock on an unreachable server: %v", err)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock with a 300ms context returned after %v", d)
	}
}

func testClosed(t *testing.T, h Harness) {
	c := h.NewClient(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 5*time.Second)
	// rueidis closes asynchronously: a call right after Close may still get
	// through. Within a moment every call must fail, with ErrClosed.
	var err error
	eventually(t, 2*time.Second, "calls keep succeeding after Close", func() bool {
		_, err = c.Backend.Eval(ctx, backend.NewScript(`return 1`), nil, nil)
		return err != nil
	})
	if !errors.Is(err, backend.ErrClosed) {
		t.Errorf("eval on a closed client: %v, want ErrClosed", err)
	}
	mu, err := primitives.NewMutex(c.Backend, "m", primitives.WithPrefix(prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	// A cluster client closes node by node: allow the lock's node a moment.
	eventually(t, 2*time.Second, "locks keep succeeding after Close", func() bool {
		_, err = mu.Lock(ctx)
		return err != nil
	})
	if !errors.Is(err, backend.ErrClosed) {
		t.Errorf("lock on a closed client: %v, want ErrClosed", err)
	}
}

func testSubscribe(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	pub := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	msgs := make(chan backend.Message, 16)
	var dropped atomic.Int32
	sub, err := b.Subscribe(ctx, backend.Handler{
		Message: func(m backend.Message) { msgs <- m },
		Dropped: func(error) { dropped.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	p := prefix(t)
	ch1, ch2 := p+"{a}:rel", p+"{b}:rel"
	if err := sub.Add(ctx, ch1, ch2); err != nil {
		t.Fatal(err)
	}
	publish := func(ch, payload string) {
		if _, err := pub.Eval(ctx, pubScript, nil, []string{ch, payload}); err != nil {
			t.Fatal(err)
		}
	}
	// Add returned: a message published now must arrive.
	publish(ch1, "1")
	publish(ch2, "*")
	for _, want := range []backend.Message{{Channel: ch1, Payload: "1"}, {Channel: ch2, Payload: "*"}} {
		select {
		case m := <-msgs:
			if m != want {
				t.Errorf("got %+v, want %+v", m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no message for %+v", want)
		}
	}
	if err := sub.Remove(ctx, ch1); err != nil {
		t.Fatal(err)
	}
	// A message on ch2 after one on ch1 proves ch1's was not delivered.
	publish(ch1, "gone")
	publish(ch2, "still")
	select {
	case m := <-msgs:
		if m != (backend.Message{Channel: ch2, Payload: "still"}) {
			t.Errorf("after Remove got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message after Remove")
	}
	if err := sub.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	publish(ch2, "closed")
	time.Sleep(50 * time.Millisecond)
	if len(msgs) != 0 || dropped.Load() != 0 {
		t.Errorf("after Close: %d messages, %d drops", len(msgs), dropped.Load())
	}
	if err := sub.Add(ctx, ch1); err == nil {
		t.Errorf("Add after Close succeeded")
	}
}

func testSubscriptionDropped(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	dropped := make(chan error, 4)
	sub, err := b.Subscribe(ctx, backend.Handler{Dropped: func(err error) { dropped <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Add(ctx, prefix(t)+"x"); err != nil {
		t.Fatal(err)
	}
	if !h.KillSubscribers(t) {
		t.Skip("the server cannot kill pub/sub connections")
	}
	select {
	case err := <-dropped:
		t.Logf("dropped: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Dropped was not called after the connection was killed")
	}
	time.Sleep(20 * time.Millisecond)
	if len(dropped) != 0 {
		t.Errorf("Dropped called more than once")
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

// RunMutex checks primitives.NewMutex on the backend.
func RunMutex(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"MutualExclusionAndFences", testMutexExclusion},
		{"TryLock", testTryLock},
		{"LostLeaseCannotTouchNextHolder", testLostLease},
		{"LockHonoursDeadline", testLockDeadline},
		{"AutoExtend", testAutoExtend},
		{"WakeOnRelease", testWakeOnRelease},
		{"CommandsPerAcquisition", testCommandsPerAcquisition},
		{"WaitersSurviveDroppedSubscription", testDroppedSubscriptionWaiters},
		{"BadInput", testMutexBadInput},
		{"OddNames", testOddNames},
	})
}

// testMutexExclusion: 32 goroutines x 200 increments of a counter kept in
// Redis by a plain GET then SET (deliberately non-atomic) under the mutex.
// A single overlap of two holders loses an update; fences are recorded in
// grant order and must strictly increase.
func testMutexExclusion(t *testing.T, h Harness) {
	const goroutines, rounds = 32, 200
	p := prefix(t)
	counter := p + "counter"
	clients := make([]backend.Backend, 4)
	for i := range clients {
		clients[i] = h.NewClient(t).Backend
	}
	ctx := ctxT(t, 3*time.Minute)
	var (
		mu     sync.Mutex // guards fences; taken only inside the lock
		fences []int64
		inside atomic.Int32
		wg     sync.WaitGroup
	)
	for g := 0; g < goroutines; g++ {
		b := clients[g%len(clients)]
		m, err := primitives.NewMutex(b, "counter", primitives.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				if err := incr(ctx, b, counter, 0); err != nil {
					t.Error(err)
					return
				}
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := do(t, clients[0], "GET", counter); got != fmt.Sprint(goroutines*rounds) {
		t.Errorf("counter = %v, want %d: an update was lost, two holders overlapped", got, goroutines*rounds)
	}
	if len(fences) != goroutines*rounds {
		t.Fatalf("%d fences recorded", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence went from %d to %d at grant %d", fences[i-1], fences[i], i)
		}
	}
}

func testTryLock(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	m, err := primitives.NewMutex(b, "t", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if len(l.Token()) != 32 || l.Name() != "t" || l.Fence() < 1 {
		t.Errorf("lease: token %d chars, name %q, fence %d", len(l.Token()), l.Name(), l.Fence())
	}
	if got := do(t, b, "GET", keyOf(p, "t")); got != l.Token() {
		t.Errorf("key holds %v, want the token", got)
	}
	start := time.Now()
	_, err = m.TryLock(ctx)
	if !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("second TryLock: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryLock waited %v", d)
	}
	d, err := l.TTL(ctx)
	if err != nil || d <= 0 || d > primitives.DefaultTTL {
		t.Errorf("TTL = %v, %v", d, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.TTL(ctx); d <= primitives.DefaultTTL {
		t.Errorf("TTL after Extend(1m) = %v", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	default:
		t.Error("Context not done after Release")
	}
	if err := l.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("second Release: %v, want ErrLeaseLost", err)
	}
	if v := do(t, b, "EXISTS", keyOf(p, "t")); v != int64(0) {
		t.Errorf("key still exists after Release")
	}
}

// testLostLease: a lease whose key expired, or was deleted behind its back,
// cannot release or extend the next holder's lock.
func testLostLease(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	key := keyOf(p, "l")
	m, err := primitives.NewMutex(b, "l", primitives.WithPrefix(p), primitives.WithTTL(200*time.Millisecond), primitives.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	next, err := primitives.NewMutex(b, "l", primitives.WithPrefix(p), primitives.WithTTL(time.Minute), primitives.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"expired", "deleted"} {
		a, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if how == "expired" {
			advance(t, h, 300*time.Millisecond)
		} else {
			do(t, b, "DEL", key)
		}
		bl, err := next.TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: next holder: %v", how, err)
		}
		if bl.Fence() <= a.Fence() {
			t.Errorf("%s: next fence %d not above %d", how, bl.Fence(), a.Fence())
		}
		if err := a.Extend(ctx, time.Hour); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old Extend: %v, want ErrLeaseLost", how, err)
		}
		if _, err := a.TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old TTL: %v, want ErrLeaseLost", how, err)
		}
		if err := a.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s: old Release: %v, want ErrLeaseLost", how, err)
		}
		select {
		case <-a.Context().Done():
		default:
			t.Errorf("%s: old lease's Context not done", how)
		}
		if got := do(t, b, "GET", key); got != bl.Token() {
			t.Errorf("%s: the next holder's key was touched: holds %v", how, got)
		}
		if d := do(t, b, "PTTL", key).(int64); d < 50_000 || d > 60_000 {
			t.Errorf("%s: the next holder's TTL was changed to %dms", how, d)
		}
		if err := bl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testLockDeadline(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	p := prefix(t)
	m, err := primitives.NewMutex(b, "d", primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	held, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, d := range []time.Duration{10 * time.Millisecond, 200 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		_, err = m.Lock(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline %v: %v, want DeadlineExceeded", d, err)
		}
		if took > d+150*time.Millisecond {
			t.Errorf("deadline %v: Lock returned after %v", d, took)
		}
	}
}

// testAutoExtend: a 300ms lease stays alive for 3s; deleting its key ends
// its Context within TTL/3 plus a margin.
func testAutoExtend(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	const ttl = 300 * time.Millisecond
	m, err := primitives.NewMutex(b, "a", primitives.WithPrefix(p), primitives.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
			t.Fatalf("lease lapsed: TryLock by another: %v", err)
		}
		select {
		case <-l.Context().Done():
			t.Fatalf("Context ended while renewals succeed: %v", context.Cause(l.Context()))
		default:
		}
	}
	do(t, b, "DEL", keyOf(p, "a"))
	deleted := time.Now()
	select {
	case <-l.Context().Done():
		took := time.Since(deleted)
		t.Logf("Context done %v after the key was deleted", took)
		if !errors.Is(context.Cause(l.Context()), latchkit.ErrLeaseLost) {
			t.Errorf("cause %v, want ErrLeaseLost", context.Cause(l.Context()))
		}
	case <-time.After(ttl/3 + 200*time.Millisecond):
		t.Fatal("Context not done within TTL/3 after the key was deleted")
	}
	if err := l.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("Release of a lost lease: %v", err)
	}
}

// testWakeOnRelease: a waiter behind a holder acquires within milliseconds
// of the release, not after a polling interval. The holder holds long
// enough for a polling waiter's backoff to have grown to its cap (500ms).
func testWakeOnRelease(t *testing.T, h Harness) {
	holderB := h.NewClient(t).Backend
	waiterB := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	hm, _ := primitives.NewMutex(holderB, "w", primitives.WithPrefix(p))
	wm, _ := primitives.NewMutex(waiterB, "w", primitives.WithPrefix(p))
	var worst time.Duration
	for round := 0; round < 3; round++ {
		l, err := hm.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			wl, err := wm.Lock(ctx)
			at := time.Now()
			if err != nil {
				t.Error(err)
			} else {
				wl.Release(ctx)
			}
			got <- at
		}()
		time.Sleep(1200 * time.Millisecond)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		at := <-got
		worst = max(worst, at.Sub(released))
	}
	t.Logf("worst handoff after release: %v", worst)
	if worst > 100*time.Millisecond {
		t.Errorf("waiter acquired %v after the release: it polled instead of being woken", worst)
	}
}

// testCommandsPerAcquisition: 16 goroutines contending for one mutex send
// at most 4 commands per acquisition on average (attempts, releases and
// subscription changes together): a release hands the lock over and wakes
// only the new holder, whose one confirming attempt is all it costs.
func testCommandsPerAcquisition(t *testing.T, h Harness) {
	c := h.NewClient(t)
	if c.Commands == nil {
		t.Skip("the harness cannot count commands")
	}
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	const goroutines, rounds = 16, 25
	before := c.Commands()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		m, _ := primitives.NewMutex(c.Backend, "c", primitives.WithPrefix(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	per := float64(c.Commands()-before) / (goroutines * rounds)
	t.Logf("%.2f commands per acquisition (including its release)", per)
	if per > 4 {
		t.Errorf("%.2f commands per acquisition, want at most 4", per)
	}
}

// testDroppedSubscriptionWaiters: killing the pub/sub connection while a
// waiter sleeps does not strand it: it falls back to its timer, the
// subscription comes back, and the next release wakes it promptly again.
func testDroppedSubscriptionWaiters(t *testing.T, h Harness) {
	holderB := h.NewClient(t).Backend
	waiterB := h.NewClient(t).Backend
	ctx := ctxT(t, 30*time.Second)
	p := prefix(t)
	hm, _ := primitives.NewMutex(holderB, "s", primitives.WithPrefix(p))
	wm, _ := primitives.NewMutex(waiterB, "s", primitives.WithPrefix(p))
	l, err := hm.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		wl, err := wm.Lock(ctx)
		got <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		wl.Release(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	if !h.KillSubscribers(t) {
		l.Release(ctx)
		<-got
		t.Skip("the server cannot kill pub/sub connections")
	}
	// Give the hub time to notice and re-subscribe, then release: the
	// waiter must hear of it without waiting out the 10s TTL.
	time.Sleep(700 * time.Millisecond)
	// Where killing subscribers drops every connection (miniredis restarts),
	// the holder's release may meet a dead connection: retrying it is safe.
	for try := 0; ; try++ {
		err := l.Release(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, backend.ErrUnavailable) || try == 5 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	released := time.Now()
	select {
	case at := <-got:
		t.Logf("acquired %v after the release", at.Sub(released))
		if d := at.Sub(released); d > 2*time.Second {
			t.Errorf("waiter took %v after the release", d)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("waiter stranded after its subscription was killed")
	}
}

func testMutexBadInput(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	bad := []struct {
		what string
		b    backend.Backend
		name string
		opts []primitives.Option
	}{
		{"nil backend", nil, "n", nil},
		{"empty name", b, "", nil},
		{"ttl below 1ms", b, "n", []primitives.Option{primitives.WithTTL(500 * time.Microsecond)}},
		{"negative ttl", b, "n", []primitives.Option{primitives.WithTTL(-time.Second)}},
		{"prefix with a brace", b, "n", []primitives.Option{primitives.WithPrefix("a{b")}},
	}
	for _, c := range bad {
		m, err := primitives.NewMutex(c.b, c.name, append([]primitives.Option{primitives.WithPrefix(p)}, c.opts...)...)
		if !errors.Is(err, latchkit.ErrInvalid) || m != nil {
			t.Errorf("%s: %v, want ErrInvalid and no mutex", c.what, err)
		}
	}
	// Nothing was written for the rejected constructors.
	if v := do(t, b, "EXISTS", keyOf(p, "n")); v != int64(0) {
		t.Errorf("a rejected constructor wrote a key")
	}

	// The lock key, or its fence counter, holds another kind of value:
	// TryLock and Lock fail with ErrInvalid, and the value is untouched.
	m, _ := primitives.NewMutex(b, "w", primitives.WithPrefix(p))
	lockKey, fenceKey := keyOf(p, "w"), keyOf(p, "w")+":fence"
	for _, set := range []struct {
		what, key string
		cmd       []string
		check     []string
		want      backend.Value
	}{
		{"lock key is a hash", lockKey, []string{"HSET", lockKey, "f", "v"}, []string{"HGET", lockKey, "f"}, "v"},
		{"fence key is a list", fenceKey, []string{"RPUSH", fenceKey, "x"}, []string{"LRANGE", fenceKey, "0", "-1"}, []backend.Value{"x"}},
		{"fence key is not a number", fenceKey, []string{"SET", fenceKey, "abc"}, []string{"GET", fenceKey}, "abc"},
	} {
		do(t, b, set.cmd[0], set.cmd[1], set.cmd[2:]...)
		for _, lock := range []func(context.Context) (latchkit.Lease, error){m.TryLock, m.Lock} {
			l, err := lock(ctx)
			if !errors.Is(err, latchkit.ErrInvalid) || l != nil {
				t.Errorf("%s: %v, want ErrInvalid", set.what, err)
			}
		}
		if got := do(t, b, set.check[0], set.check[1], set.check[2:]...); fmt.Sprint(got) != fmt.Sprint(set.want) {
			t.Errorf("%s: value changed to %v", set.what, got)
		}
		if set.key == fenceKey {
			if v := do(t, b, "EXISTS", lockKey); v != int64(0) {
				t.Errorf("%s: the lock key was written", set.what)
			}
		}
		do(t, b, "DEL", set.key)
	}
	// An invalid Extend changes nothing either.
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := do(t, b, "PTTL", lockKey).(int64)
	if err := l.Extend(ctx, 0); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("Extend(0): %v, want ErrInvalid", err)
	}
	if after := do(t, b, "PTTL", lockKey).(int64); after > before {
		t.Errorf("Extend(0) changed the TTL from %d to %d", before, after)
	}
	l.Release(ctx)
}

// testOddNames: names that contain hash-tag braces, percent signs, spaces
// or odd bytes work for every primitive. On a Cluster this shows that all
// keys of one primitive still share one slot (a CROSSSLOT error fails it).
func testOddNames(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	names := []string{"a}b{c", "{", "}", "{}", "}x{", "%7B", "with space", "ü\x00\xff"}
	for _, n := range names {
		var leases []latchkit.Lease
		try := func(what string, l latchkit.Lease, err error) {
			if err != nil {
				t.Errorf("%s %q: %v", what, n, err)
				return
			}
			leases = append(leases, l)
		}
		m, _ := primitives.NewMutex(b, n, primitives.WithPrefix(p))
		l, err := m.TryLock(ctx)
		try("mutex", l, err)
		rw, _ := primitives.NewRWLock(b, n, primitives.WithPrefix(p))
		l, err = rw.TryRLock(ctx)
		try("rwlock", l, err)
		s, _ := primitives.NewSemaphore(b, n, 2, primitives.WithPrefix(p))
		l, err = s.TryAcquire(ctx)
		try("semaphore", l, err)
		fs, _ := primitives.NewFairSemaphore(b, n, 2, primitives.WithPrefix(p))
		l, err = fs.TryAcquire(ctx)
		try("fair semaphore", l, err)
		for _, l := range leases {
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Errorf("extend %q: %v", n, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("release %q: %v", n, err)
			}
		}
	}
	// A MultiLock over all of them: one script on a single server, one name
	// at a time on a Cluster.
	ml, err := primitives.NewMultiLock(b, names, primitives.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ml.TryLock(ctx)
	if err != nil {
		t.Fatalf("multilock over the odd names: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}
