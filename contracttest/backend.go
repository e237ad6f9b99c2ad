package contracttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

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
	mu, err := primitives.NewMutex(clienttest.For(t, b), "m", primitives.WithPrefix(prefix(t)))
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
	// A cluster client closes node by node: allow the lock's node a moment.
	// A Lock that still got through holds its name (its release may fail
	// on the closing client), so each try takes a name of its own: the
	// next Lock must fail for the closed client, not wait for the last
	// one's lease (seen with valkey-go's cluster client).
	n := 0
	eventually(t, 2*time.Second, "locks keep succeeding after Close", func() bool {
		n++
		mu, merr := primitives.NewMutex(clienttest.For(t, c.Backend), fmt.Sprint("m", n), primitives.WithPrefix(prefix(t)))
		if merr != nil {
			t.Fatal(merr)
		}
		var l latchkit.Lease
		l, err = mu.Lock(ctx)
		if err == nil {
			l.Release(ctx)
		}
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
	// ch1 and ch2 lie in different slots (on different masters of a
	// Cluster); ch3 shares ch1's slot.
	ch1, ch2, ch3 := p+"{a}:rel", p+"{b}:rel", p+"{a}:other"
	if err := sub.Add(ctx, ch1, ch2, ch3); err != nil {
		t.Fatal(err)
	}
	// publish sends PUBLISH through the node serving route's slot. On a
	// Cluster a message reaches a subscriber on another node over the
	// cluster bus, so only messages published through the same node
	// arrive in the order they were published.
	publish := func(route, ch, payload string) {
		if _, err := pub.Eval(ctx, pubScript, []string{route}, []string{ch, payload}); err != nil {
			t.Fatal(err)
		}
	}
	next := func(what string) backend.Message {
		select {
		case m := <-msgs:
			return m
		case <-time.After(5 * time.Second):
			t.Fatalf("no message for %s", what)
			return backend.Message{}
		}
	}
	// Add returned: a message published now must arrive, on each slot.
	publish(ch1, ch1, "1")
	publish(ch2, ch2, "*")
	got := map[backend.Message]bool{next("ch1"): true, next("ch2"): true}
	for _, want := range []backend.Message{{Channel: ch1, Payload: "1"}, {Channel: ch2, Payload: "*"}} {
		if !got[want] {
			t.Errorf("got %v, want %+v among them", got, want)
		}
	}
	if err := sub.Remove(ctx, ch1); err != nil {
		t.Fatal(err)
	}
	// A message on ch3 published after one on ch1 through the same node
	// proves ch1's was not delivered.
	publish(ch1, ch1, "gone")
	publish(ch1, ch3, "still")
	if m := next("ch3 after Remove"); m != (backend.Message{Channel: ch3, Payload: "still"}) {
		t.Errorf("after Remove got %+v", m)
	}
	publish(ch2, ch2, "kept")
	if m := next("ch2 after Remove"); m != (backend.Message{Channel: ch2, Payload: "kept"}) {
		t.Errorf("after Remove got %+v", m)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	publish(ch2, ch2, "closed")
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
