package contracttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// RunLatch checks primitives.NewLatch on the backend.
func RunLatch(t *testing.T, h Harness) {
	runSteps(t, h, []step{
		{"SetCountDownCount", testLatchCounting},
		{"WaitOnOpenLatch", testLatchWaitOpen},
		{"WaitWokenByLastCountDown", testLatchWake},
		{"WaitOpensOnExpiry", testLatchExpiry},
		{"RepeatedCallsCountOnce", testLatchRepeats},
		{"Concurrent", testLatchConcurrent},
		{"BadInput", testLatchBadInput},
	})
}

// latchKey is the hash of the latch named name under prefix p.
func latchKey(p, name string) string { return keyspace.LatchLayout.KeysOf(p, name)[0] }

func newLatch(t testing.TB, b backend.Backend, name string, opts ...primitives.Option) primitives.Latch {
	t.Helper()
	l, err := primitives.NewLatch(clienttest.For(t, b), name, clienttest.Fitting[primitives.LatchOption](opts)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantCount(t testing.TB, ctx context.Context, l primitives.Latch, want int64, when string) {
	t.Helper()
	if n, err := l.Count(ctx); err != nil || n != want {
		t.Fatalf("%s: Count = %d, %v; want %d", when, n, err, want)
	}
}

// testLatchCounting: TrySetCount, CountDown and Count; TrySetCount is
// refused while the count is above zero; counting down at zero is a no-op;
// a latch at zero is set again (reusable); the key lives the retention
// after the last call that changed it, and a minute once at zero.
func testLatchCounting(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	const retention = time.Hour
	l := newLatch(t, b, "c", primitives.WithPrefix(p), primitives.WithRetention(retention))
	key := latchKey(p, "c")
	wantCount(t, ctx, l, 0, "never set")
	pttl := func() time.Duration { return time.Duration(do(t, b, "PTTL", key).(int64)) * time.Millisecond }

	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount(3) on a new latch: %v, %v", ok, err)
	}
	wantCount(t, ctx, l, 3, "set to 3")
	if d := pttl(); d <= retention-time.Minute || d > retention {
		t.Errorf("a set latch's key has %v left, want about the retention %v", d, retention)
	}
	other := newLatch(t, h.NewClient(t).Backend, "c", primitives.WithPrefix(p), primitives.WithRetention(retention))
	if ok, err := other.TrySetCount(ctx, 5); ok || err != nil {
		t.Errorf("TrySetCount(5) while the count is 3: %v, %v; want false", ok, err)
	}
	wantCount(t, ctx, l, 3, "after a refused TrySetCount")
	for want := int64(2); want >= 0; want-- {
		if err := other.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		wantCount(t, ctx, l, want, "after a CountDown")
		if want > 0 {
			if d := pttl(); d <= retention-time.Minute {
				t.Errorf("after a CountDown the key has %v left, want the retention %v again", d, retention)
			}
		}
	}
	if d := pttl(); d <= 0 || d > time.Minute {
		t.Errorf("at zero the key has %v left, want at most a minute", d)
	}
	// Below zero: nothing changes, the count stays 0.
	for i := 0; i < 3; i++ {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantCount(t, ctx, l, 0, "after counting down at zero")
	if err := l.Wait(ctx); err != nil {
		t.Errorf("Wait at zero: %v", err)
	}
	// Reusable: a new TrySetCount sets it again.
	if ok, err := other.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount(2) at zero: %v, %v; want true", ok, err)
	}
	wantCount(t, ctx, l, 2, "set again")
	if d := pttl(); d <= retention-time.Minute {
		t.Errorf("a latch set again has %v left, want the retention %v", d, retention)
	}
	if ok, _ := l.TrySetCount(ctx, 1); ok {
		t.Errorf("TrySetCount(1) while the count is 2: true")
	}
	// A count far beyond what a Lua number holds exactly is kept exactly.
	big := newLatch(t, b, "big", primitives.WithPrefix(p))
	const huge = int64(1)<<62 + 1
	if ok, err := big.TrySetCount(ctx, huge); !ok || err != nil {
		t.Fatalf("TrySetCount(%d): %v, %v", huge, ok, err)
	}
	if err := big.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(t, ctx, big, huge-1, "a huge count counted down")
}

// testLatchWaitOpen: Wait returns at once on a latch never set and on a
// latch at zero.
func testLatchWaitOpen(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	// A policy that would make any wait obvious.
	l := newLatch(t, b, "o", primitives.WithPrefix(p), primitives.WithRetry(retry.Constant(30*time.Second)))
	start := time.Now()
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait on a latch never set: %v", err)
	}
	if ok, _ := l.TrySetCount(ctx, 1); !ok {
		t.Fatal("TrySetCount(1) on a new latch refused")
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait at zero: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two Waits on an open latch took %v", d)
	}
	if do(t, b, "EXISTS", latchKey(p, "never")) != int64(0) {
		t.Fatal("a key exists before any call")
	}
	_ = newLatch(t, b, "never", primitives.WithPrefix(p)).Wait(ctx)
	if do(t, b, "EXISTS", latchKey(p, "never")) != int64(0) {
		t.Error("Wait on a latch never set wrote its key")
	}
}

// testLatchWake: a Wait on another client is woken by the count-down that
// reaches zero, within a round trip or so: its retry policy's delay is
// 30 s, so only the message can wake it in time; then a waiter with the
// default policy (on the same client, now connected and subscribed) sends
// at most 4 commands (a health check PING may be among them) in its 600 ms
// of waiting: it does not poll. A Wait whose context ends returns its
// error promptly.
func testLatchWake(t *testing.T, h Harness) {
	setter := h.NewClient(t).Backend
	wc := h.NewClient(t)
	ctx := ctxT(t, time.Minute)
	p := prefix(t)
	sl := newLatch(t, setter, "w", primitives.WithPrefix(p))
	if ok, err := sl.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	for _, c := range []struct {
		what string
		opts []primitives.Option
	}{
		{"30s retry delay", []primitives.Option{primitives.WithRetry(retry.Constant(30 * time.Second))}},
		{"default retry", nil},
	} {
		if c.opts == nil {
			if ok, err := sl.TrySetCount(ctx, 2); !ok || err != nil {
				t.Fatalf("TrySetCount again: %v, %v", ok, err)
			}
		}
		wl := newLatch(t, wc.Backend, "w", append(c.opts, primitives.WithPrefix(p))...)
		var before int64
		if wc.Commands != nil {
			before = wc.Commands()
		}
		done := make(chan error, 1)
		go func() { done <- wl.Wait(ctx) }()
		if err := sl.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond) // the waiter subscribes and sleeps
		select {
		case err := <-done:
			t.Fatalf("%s: Wait returned at count 1: %v", c.what, err)
		default:
		}
		var sent int64
		if wc.Commands != nil {
			sent = wc.Commands() - before
		}
		start := time.Now()
		if err := sl.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			d := time.Since(start)
			t.Logf("%s: Wait returned %v after the last CountDown; %d commands while it waited", c.what, d, sent)
			if err != nil {
				t.Fatalf("%s: Wait: %v", c.what, err)
			}
			if d > time.Second {
				t.Errorf("%s: Wait returned %v after the last CountDown, want well under a second", c.what, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Wait not woken by the last CountDown", c.what)
		}
		// With the default policy (5 ms, doubling) a poller would read
		// about seven times in 600 ms. (The first waiter's count includes
		// its client's connection set-up.)
		if c.opts == nil && sent > 4 {
			t.Errorf("%s: the waiter sent %d commands in 600 ms of waiting: it polls", c.what, sent)
		}
	}
	// A Wait whose context ends returns its error, on time.
	if ok, _ := sl.TrySetCount(ctx, 1); !ok {
		t.Fatal("TrySetCount refused at zero")
	}
	wl := newLatch(t, wc.Backend, "w", primitives.WithPrefix(p))
	dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := wl.Wait(dctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its deadline: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 150*time.Millisecond+500*time.Millisecond {
		t.Errorf("Wait with a 150ms deadline returned after %v", d)
	}
	var oe *latchkit.OpError
	if !errors.As(err, &oe) || oe.Kind != latchkit.KindLatch || oe.Name != "w" {
		t.Errorf("Wait's error %v names no latch", err)
	}
}

// testLatchExpiry: a set latch nobody touches for its retention expires
// and reads as open; a Wait on it returns then, told by the key's
// remaining time, without any message and although its retry policy's
// delay is 30 s.
func testLatchExpiry(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	ctx := ctxT(t, 30*time.Second)
	p := prefix(t)
	const retention = 400 * time.Millisecond
	l := newLatch(t, b, "e", primitives.WithPrefix(p), primitives.WithRetention(retention),
		primitives.WithRetry(retry.Constant(30*time.Second)))
	if ok, err := l.TrySetCount(ctx, 5); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Wait returned on a set latch before its retention ran out: %v", err)
	default:
	}
	advance(t, h, retention)
	select {
	case err := <-done:
		t.Logf("Wait returned %v after the latch was set (retention %v)", time.Since(start), retention)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return once the latch's key expired")
	}
	wantCount(t, ctx, l, 0, "after the retention")
	if do(t, b, "EXISTS", latchKey(p, "e")) != int64(0) {
		t.Error("the key outlived its retention")
	}
	if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
		t.Errorf("TrySetCount on an expired latch: %v, %v; want true", ok, err)
	}
}

// testLatchBadInput: what is refused, with an error matching
// latchkit.ErrInvalid, and that nothing changes in Redis:
//   - a nil backend, an empty name, a prefix with a brace, a retention
//     below 1ms, WithReplicaAck: NewLatch refuses (no latch);
//   - TrySetCount(0) and TrySetCount(-1): refused before any command is
//     sent (the client's command count does not move) and no key appears;
//   - the latch's key holding a string, a list, a hash that is not a
//     latch's, or a latch's hash whose count is not a number: every call
//     (TrySetCount, CountDown, Count, Wait) fails with ErrInvalid, Wait at
//     once (it does not retry), and the key's value, type and expiry are
//     unchanged.
func testLatchBadInput(t *testing.T, h Harness) {
	c := h.NewClient(t)
	b := c.Backend
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	for _, bad := range []struct {
		what string
		b    backend.Backend
		name string
		opts []primitives.Option
	}{
		{"nil backend", nil, "l", nil},
		{"empty name", b, "", nil},
		{"prefix with a brace", b, "l", []primitives.Option{primitives.WithPrefix("a}")}},
		{"retention below 1ms", b, "l", []primitives.Option{primitives.WithRetention(time.Microsecond)}},
	} {
		l, err := primitives.NewLatch(clienttest.For(t, bad.b), bad.name, clienttest.Fitting[primitives.LatchOption](append([]primitives.Option{primitives.WithPrefix(p)}, bad.opts...))...)
		if !errors.Is(err, latchkit.ErrInvalid) || l != nil {
			t.Errorf("NewLatch with %s: %v, want ErrInvalid and no latch", bad.what, err)
		}
	}

	l := newLatch(t, b, "l", primitives.WithPrefix(p))
	key := latchKey(p, "l")
	for _, n := range []int64{0, -1} {
		var before int64
		if c.Commands != nil {
			before = c.Commands()
		}
		ok, err := l.TrySetCount(ctx, n)
		if ok || !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("TrySetCount(%d): %v, %v; want false and ErrInvalid", n, ok, err)
		}
		if c.Commands != nil && c.Commands() != before {
			t.Errorf("TrySetCount(%d) sent %d commands, want none", n, c.Commands()-before)
		}
	}
	if do(t, b, "EXISTS", key) != int64(0) {
		t.Error("a refused TrySetCount wrote the key")
	}

	for _, v := range []struct {
		what  string
		set   []string // the command that puts the value there
		check []string // the command that reads it back
		want  string
	}{
		{"a string", []string{"SET", "precious"}, []string{"GET"}, "precious"},
		{"a list", []string{"RPUSH", "x", "y"}, []string{"LRANGE", "0", "-1"}, "[x y]"},
		{"someone else's hash", []string{"HSET", "f", "v"}, []string{"HGETALL"}, "[f v]"},
		{"a latch whose count is not a number", []string{"HSET", "count", "many"}, []string{"HGETALL"}, "[count many]"},
	} {
		do(t, b, v.set[0], key, v.set[1:]...)
		check := func(call string, err error) {
			t.Helper()
			if !errors.Is(err, latchkit.ErrInvalid) {
				t.Errorf("%s on %s: %v, want ErrInvalid", call, v.what, err)
			}
			if got := fmt.Sprint(do(t, b, v.check[0], key, v.check[1:]...)); got != v.want {
				t.Errorf("%s on %s changed it to %s", call, v.what, got)
			}
			if ttl := do(t, b, "PTTL", key); ttl != int64(-1) {
				t.Errorf("%s on %s set an expiry (PTTL %v)", call, v.what, ttl)
			}
		}
		ok, err := l.TrySetCount(ctx, 3)
		if ok {
			t.Errorf("TrySetCount on %s: true", v.what)
		}
		check("TrySetCount", err)
		check("CountDown", l.CountDown(ctx))
		_, err = l.Count(ctx)
		check("Count", err)
		start := time.Now()
		check("Wait", l.Wait(ctx))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Wait on %s took %v to fail", v.what, d)
		}
		do(t, b, "DEL", key)
	}
}
