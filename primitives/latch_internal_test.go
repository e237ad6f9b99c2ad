package primitives

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/retry"
)

// The Latch's scripts as the backend runs them (latch.go loads them
// through package kit, whose Script hides them): the same source, so the
// same hash.
var (
	latchSetScript  = loadScript("latch_set")
	latchDownScript = loadScript("latch_down")
	latchReadScript = loadScript("latch_read")
)

// lostReplies runs the first n latch calls it sees on the server, then
// reports Redis unreachable instead of their replies: the calls were
// applied, their callers cannot know.
type lostReplies struct {
	backend.Backend
	n, seen atomic.Int32
}

func (f *lostReplies) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	v, err := f.Backend.Eval(ctx, s, keys, args)
	if (s.Hash() == latchSetScript.Hash() || s.Hash() == latchDownScript.Hash()) && f.seen.Add(1) <= f.n.Load() {
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: reply lost, connection reset")}
	}
	return v, err
}

// A TrySetCount and a CountDown whose replies were lost are tried again
// with the same id: the TrySetCount reports true (it did set the count),
// the CountDown counts once, and both return nil.
func TestLatchLostRepliesTriedAgainWithTheSameID(t *testing.T) {
	_, b := newMiniBackend(t)
	ctx := context.Background()
	f := &lostReplies{Backend: b}
	f.n.Store(2)
	l, err := NewLatch(testClient(t, f), "l", WithRetry(retry.Constant(time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount whose first two replies were lost: %v, %v; want true", ok, err)
	}
	f.seen.Store(0)
	if err := l.CountDown(ctx); err != nil {
		t.Fatalf("CountDown whose first two replies were lost: %v", err)
	}
	if n, err := l.Count(ctx); n != 2 || err != nil {
		t.Errorf("Count after one CountDown tried three times: %d, %v; want 2", n, err)
	}
	// Once the context ends, the call stops trying; its error says both.
	f.n.Store(1 << 30)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	err = l.CountDown(dctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("CountDown that never got a reply: %v, want DeadlineExceeded and ErrUnavailable", err)
	}
}

// The retention, on the server's clock: a set latch's key lives the
// retention after its last change; once at zero, a minute; a latch whose
// key expired reads as open and leaves no key. Ids of a round's calls are
// kept across a re-arming for a minute, then forgotten.
func TestLatchRetention(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Now()
	m.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b := goredis.New(c)
	ctx := context.Background()
	tick := func(d time.Duration) { now = now.Add(d); m.SetTime(now); m.FastForward(d) }
	l, _ := NewLatch(testClient(t, b), "r", WithRetention(time.Hour))
	key := keyspace.LatchLayout.KeysOf(kit.DefaultPrefix, "r")[0]
	l.TrySetCount(ctx, 3)
	if ttl := m.TTL(key); ttl != time.Hour {
		t.Errorf("set: ttl %v, want 1h", ttl)
	}
	tick(50 * time.Minute)
	l.CountDown(ctx)
	if ttl := m.TTL(key); ttl != time.Hour {
		t.Errorf("after a CountDown 50 min later: ttl %v, want 1h again", ttl)
	}
	tick(61 * time.Minute)
	if n, err := l.Count(ctx); n != 0 || err != nil {
		t.Errorf("after the retention: Count %d, %v; want 0", n, err)
	}
	if keys := keyspace.WithoutClientRecords(m.Keys()); len(keys) != 0 {
		t.Errorf("keys left after the retention: %v", keys)
	}
	if err := l.Wait(ctx); err != nil {
		t.Errorf("Wait on an expired latch: %v", err)
	}

	// Round A reaches zero: a minute left; round B re-arms it at once
	// and keeps A's ids, stamped with the clock; a re-arming more than a
	// minute after that forgets them, and stamps B's (issue 39: no call
	// but a re-arming reads the clock; ids were stamped by each call, and
	// B's set was forgotten a minute after it was made, although its
	// round had just ended).
	l.TrySetCount(ctx, 2)
	l.CountDown(ctx)
	l.CountDown(ctx)
	if ttl := m.TTL(key); ttl != kit.MarkerTTL {
		t.Errorf("at zero: ttl %v, want %v", ttl, kit.MarkerTTL)
	}
	ids := func() (n int, stamped []string) {
		fields, _ := m.HKeys(key)
		for _, f := range fields {
			if strings.HasPrefix(f, "s:") || strings.HasPrefix(f, "d:") {
				n++
				if m.HGet(key, f) != "r" {
					stamped = append(stamped, f)
				}
			}
		}
		return n, stamped
	}
	l.TrySetCount(ctx, 1) // B
	if n, _ := ids(); n != 4 {
		t.Errorf("round B set at once: %d ids kept, want 4 (A's set and two count-downs, B's set)", n)
	}
	tick(61 * time.Second)
	l.CountDown(ctx)      // B done
	l.TrySetCount(ctx, 1) // C
	n, stamped := ids()
	if n != 3 {
		t.Errorf("round C set a minute later: %d ids kept, want 3 (B's set and count-down, C's set)", n)
	}
	// A late copy of B's count-down, in round C, is recognized.
	for _, f := range stamped {
		if !strings.HasPrefix(f, "d:") {
			continue
		}
		if _, err := b.Eval(ctx, latchDownScript, []string{key}, []string{strings.TrimPrefix(f, "d:"), "ch", kit.Ms(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if c, err := l.Count(ctx); c != 1 || err != nil {
			t.Errorf("a late copy of round B's count-down, in round C: count %d, %v; want 1 (recognized)", c, err)
		}
	}
	if len(stamped) != 2 {
		t.Errorf("round C set: ids of ended rounds %v, want B's set and count-down", stamped)
	}
	tick(61 * time.Second)
	l.CountDown(ctx)      // C done
	l.TrySetCount(ctx, 1) // D
	if n, _ := ids(); n != 3 {
		t.Errorf("round D set a minute later: %d ids kept, want 3 (C's set and count-down, D's set)", n)
	}
}

// A latch's Wait behind Reentrant (which keeps a hold per owner) returns,
// and returns again for the same owner: no hold is kept for a nil lease.
func TestLatchWaitThroughReentrant(t *testing.T) {
	_, b := newMiniBackend(t)
	l, err := NewLatch(testClient(t, b), "re", WithMiddleware(reentrantMiddleware()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(WithOwner(context.Background(), "me"), 5*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("Wait %d: %v", i+1, err)
		}
	}
	if err := l.Wait(context.Background()); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("Wait without an owner behind Reentrant: %v, want ErrInvalid", err)
	}
}

// beforeRead runs f once, before the nth latch read made through it.
type beforeRead struct {
	backend.Backend
	n    int32
	seen atomic.Int32
	f    func()
}

func (b *beforeRead) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s.Hash() == latchReadScript.Hash() && b.seen.Add(1) == b.n {
		b.f()
	}
	return b.Backend.Eval(ctx, s, keys, args)
}

// A Wait returns when the round it saw ended, even if the latch was set
// again before the Wait could read the zero: between its first read
// (count 1, round A) and its second, the latch reaches zero and round B
// begins.
func TestLatchWaitReturnsWhenItsRoundEnded(t *testing.T) {
	_, b := newMiniBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	other, _ := NewLatch(testClient(t, b), "rounds")
	if ok, _ := other.TrySetCount(ctx, 1); !ok {
		t.Fatal("TrySetCount refused")
	}
	hook := &beforeRead{Backend: b, n: 2, f: func() {
		if err := other.CountDown(ctx); err != nil {
			t.Error(err)
		}
		if ok, _ := other.TrySetCount(ctx, 1); !ok {
			t.Error("round B: TrySetCount refused")
		}
	}}
	w, _ := NewLatch(testClient(t, hook), "rounds")
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("Wait across a round that ended and a new one: %v", err)
	}
	if n, _ := other.Count(ctx); n != 1 {
		t.Errorf("round B's count %d, want 1", n)
	}
}

// A retry policy that gives up ends a Wait with an error matching
// latchkit.ErrNotAcquired that says the count: two attempts are the read
// before subscribing and the read after, so it returns without sleeping.
func TestLatchWaitPolicyGivesUp(t *testing.T) {
	_, b := newMiniBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, _ := NewLatch(testClient(t, b), "impatient", WithRetry(retry.MaxAttempts(retry.Constant(10*time.Millisecond), 2)))
	l.TrySetCount(ctx, 2)
	start := time.Now()
	err := l.Wait(ctx)
	var oe *latchkit.OpError
	if !errors.Is(err, latchkit.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) ||
		oe.Op != "wait" || !strings.Contains(err.Error(), "latch count is 2") {
		t.Errorf("Wait whose policy gave up: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Wait whose policy gave up after two reads took %v", d)
	}
}

// countReads counts the latch reads made through it that have returned.
type countReads struct {
	backend.Backend
	reads atomic.Int32
}

func (b *countReads) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	v, err := b.Backend.Eval(ctx, s, keys, args)
	if s.Hash() == latchReadScript.Hash() {
		b.reads.Add(1)
	}
	return v, err
}

// TestBoundLatchRecheck (issue 38, finding 11; the bound latchRecheck of
// docs/bounds.md, a minute, set to 50 ms here): a Wait on a latch whose
// key has a day left reads the count again once the re-read interval has
// passed without a message, and returns when it finds the latch open: the
// key was lost (FLUSHALL, a failover), which sends no message.
func TestBoundLatchRecheck(t *testing.T) {
	m, b := newMiniBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	counted := &countReads{Backend: b}
	l, err := NewLatch(testClient(t, counted), "silent")
	if err != nil {
		t.Fatal(err)
	}
	l.(*latch).recheck = 50 * time.Millisecond
	if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	for counted.reads.Load() < 2 { // the read before subscribing and the one after: count 2
		time.Sleep(time.Millisecond)
	}
	before := counted.reads.Load()
	m.FlushAll()
	if err := <-done; err != nil {
		t.Fatalf("Wait on a latch whose key was lost: %v", err)
	}
	if counted.reads.Load() <= before {
		t.Errorf("Wait returned without reading again (%d reads)", counted.reads.Load())
	}
}
