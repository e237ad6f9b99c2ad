package primitives

import (
	"context"
	"errors"
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
)

// heldOn reports whether the Mutex-layout lock key on m is held (a value
// that is not a free marker: see keyspace.ParseLock).
func heldOn(m *miniredis.Miniredis, key string) bool {
	v, err := m.Get(key)
	return err == nil && keyspace.ParseLock(v).Owner != ""
}

func newMiniBackend(t *testing.T) (*miniredis.Miniredis, backend.Backend) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return m, goredis.New(c)
}

// A timed-out acquire may have been applied; its retry (same token) must be
// granted the same grant, not locked out by its own earlier try.
func TestMutexRetriedAttemptIsGranted(t *testing.T) {
	m, b := newMiniBackend(t)
	mu, err := newMutex(latchkit.KindMutex, core(testClient(t, b)), "r", []Option{WithAutoExtend(false), WithTTL(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tok := kit.NewToken()
	first, err := mu.attempt(ctx, &kit.Attempt{Token: tok, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.FastForward(30 * time.Second)
	again, err := mu.attempt(ctx, &kit.Attempt{Token: tok, N: 2})
	if err != nil {
		t.Fatalf("retried attempt: %v", err)
	}
	if again.Fence() != first.Fence() {
		t.Errorf("retry got fence %d, first try %d: a retry must not count as a new grant", again.Fence(), first.Fence())
	}
	if ttl := m.TTL(mu.keys[0]); ttl < 59*time.Second {
		t.Errorf("retry left ttl %v: it must refresh the ttl it promises", ttl)
	}
	// Another token is still excluded. A Try is told the holder's remaining
	// TTL; a waiting Lock, which queues, is told to come back within a
	// third of the waiter timeout, to keep its place.
	var held *latchkit.HeldError
	if _, err := mu.attempt(ctx, &kit.Attempt{Token: kit.NewToken(), N: 1, Try: true}); !errors.As(err, &held) {
		t.Errorf("other token: %v", err)
	} else if held.WaitHint < 59*time.Second {
		t.Errorf("wait hint %v, want the holder's remaining ttl", held.WaitHint)
	}
	if _, err := mu.attempt(ctx, &kit.Attempt{Token: kit.NewToken(), N: 1}); !errors.As(err, &held) {
		t.Errorf("other token: %v", err)
	} else if want := kit.DefaultWaiterTimeout / 3; held.WaitHint != want {
		t.Errorf("queued wait hint %v, want %v", held.WaitHint, want)
	}
}

// The release script remembers nothing: run again (a retry whose first
// reply was lost) it finds the token gone and says so, as it does for a
// token that never held the lock (the client judges a retry: see
// kit.Lease.release); and a late retry of an old release while another
// token holds leaves that holder alone.
func TestMutexReleaseRemembersNothing(t *testing.T) {
	m, b := newMiniBackend(t)
	mu, _ := newMutex(latchkit.KindMutex, core(testClient(t, b)), "r", []Option{WithAutoExtend(false)})
	ctx := context.Background()
	tok := kit.NewToken()
	if _, err := mu.attempt(ctx, &kit.Attempt{Token: tok, N: 1, Try: true}); err != nil {
		t.Fatal(err)
	}
	if held, err := mu.Release(ctx, tok); err != nil || !held {
		t.Fatalf("release: held=%v err=%v", held, err)
	}
	if held, err := mu.Release(ctx, tok); err != nil || held {
		t.Fatalf("release run again: held=%v err=%v, want not held (nothing remembered)", held, err)
	}
	if held, _ := mu.Release(ctx, kit.NewToken()); held {
		t.Error("a stranger's release reported success")
	}
	for _, k := range keyspace.WithoutClientRecords(m.Keys()) {
		if v, err := m.Get(k); err == nil && keyspace.ParseLock(v).Owner != "" {
			t.Errorf("key %s = %q after the release: held", k, v)
		} else if err != nil {
			t.Errorf("key %s left by a release: not the lock's marker", k)
		}
	}
	tok2 := kit.NewToken()
	if _, err := mu.attempt(ctx, &kit.Attempt{Token: tok2, N: 1, Try: true}); err != nil {
		t.Fatal(err)
	}
	if held, err := mu.Release(ctx, tok); err != nil || held {
		t.Errorf("late retry: held=%v err=%v, want not held", held, err)
	}
	if _, held, _ := mu.TTL(ctx, tok2); !held {
		t.Fatal("a late retry of an old release released the next holder")
	}
}

// flaky fails every extend, as an unreachable Redis would.
type flaky struct{ kit.Holder }

func (f flaky) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return false, backend.ErrUnavailable
}

// When renewals cannot reach Redis, the lease's Context ends before the TTL
// measured from the start of the granting call runs out.
func TestLeaseEndsBeforeTTLWhenRenewalsFail(t *testing.T) {
	_, b := newMiniBackend(t)
	mu, _ := newMutex(latchkit.KindMutex, core(testClient(t, b)), "f", []Option{WithTTL(300 * time.Millisecond)})
	start := time.Now()
	l := kit.NewLease(context.Background(), flaky{mu}, latchkit.KindMutex, "f", kit.NewToken(), 1, start, &kit.Config{Cl: mu.cfg.Cl, Cls: mu.cfg.Cls, TTL: 300 * time.Millisecond, AutoExtend: true})
	select {
	case <-l.Context().Done():
		took := time.Since(start)
		if took >= 300*time.Millisecond+timerSlack {
			t.Errorf("context ended after %v, not by the 300ms ttl (plus the timer's scheduling)", took)
		}
		if !errors.Is(context.Cause(l.Context()), latchkit.ErrLeaseLost) {
			t.Errorf("cause: %v", context.Cause(l.Context()))
		}
		t.Logf("context ended %v after the grant", took)
	case <-time.After(2 * time.Second):
		t.Fatal("context never ended")
	}
}

// Without auto-extend the Context ends when the TTL runs out by the client's
// reckoning, and Extend pushes that moment back.
func TestLeaseWithoutAutoExtendEndsAtDeadline(t *testing.T) {
	_, b := newMiniBackend(t)
	mu, _ := newMutex(latchkit.KindMutex, core(testClient(t, b)), "d", []Option{WithTTL(100 * time.Millisecond), WithAutoExtend(false)})
	ctx := context.Background()
	l, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	extended := time.Now()
	<-l.Context().Done()
	if d := time.Since(extended); d < 300*time.Millisecond || d > 400*time.Millisecond+timerSlack {
		t.Errorf("context ended %v after Extend(400ms)", d)
	}
}

func TestKeyBaseKeepsOneHashTag(t *testing.T) {
	for _, name := range []string{"a", "a}b", "{x}", "}", "{", "%7B", "a%b"} {
		k := keyspace.KeyBase("latch:", name)
		open, close := 0, 0
		for _, c := range k {
			switch c {
			case '{':
				open++
			case '}':
				close++
			}
		}
		if open != 1 || close != 1 {
			t.Errorf("name %q: key %q has %d '{' and %d '}'", name, k, open, close)
		}
	}
	if keyspace.KeyBase("p:", "{") == keyspace.KeyBase("p:", "%7B") {
		t.Error("escaping is not injective")
	}
}

// ParseKeyBase inverts KeyBase for every name, odd bytes included, and
// keeps the suffix apart.
func TestParseKeyBaseInvertsKeyBase(t *testing.T) {
	for _, name := range []string{"a", "a}b{c", "{", "}", "{}", "%7B", "%", "with space", "ü\x00\xff", "x:y"} {
		for _, suffix := range []string{"", ":fence", ":sem:holders"} {
			p, n, s, ok := keyspace.ParseKeyBase(keyspace.KeyBase("latch:", name) + suffix)
			if !ok || p != "latch:" || n != name || s != suffix {
				t.Errorf("ParseKeyBase(keyspace.KeyBase(%q)+%q) = %q, %q, %q, %v", name, suffix, p, n, s, ok)
			}
		}
	}
	for _, bad := range []string{"plain", "p{open", "p{%zz}", "p{%7}", "x{a{b}"} {
		if _, _, _, ok := keyspace.ParseKeyBase(bad); ok {
			t.Errorf("ParseKeyBase(%q) accepted a key keyspace.KeyBase cannot make", bad)
		}
	}
}

// unreleasable fails every release, as a Redis unreachable at that moment
// would, and counts renewals.
type unreleasable struct {
	kit.Holder
	extends *atomic.Int32
}

func (u unreleasable) Release(ctx context.Context, token string) (bool, error) {
	return false, backend.ErrUnavailable
}

func (u unreleasable) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	u.extends.Add(1)
	return u.Holder.Extend(ctx, token, ttl)
}

// A Release that fails stops renewals all the same: the lease expires with
// its TTL (its Context ends then) instead of being renewed for ever on
// behalf of a caller that gave up on it.
func TestFailedReleaseStopsRenewals(t *testing.T) {
	_, b := newMiniBackend(t)
	mu, _ := newMutex(latchkit.KindMutex, core(testClient(t, b)), "u", []Option{WithTTL(150 * time.Millisecond)})
	var extends atomic.Int32
	ctx := context.Background()
	if _, err := mu.attempt(ctx, &kit.Attempt{Token: "tok", N: 1, Try: true}); err != nil {
		t.Fatal(err)
	}
	l := kit.NewLease(ctx, unreleasable{mu, &extends}, latchkit.KindMutex, "u", "tok", 1, time.Now(), &kit.Config{Cl: mu.cfg.Cl, Cls: mu.cfg.Cls, TTL: 150 * time.Millisecond, AutoExtend: true})
	lctx := l.Context()
	if err := l.Release(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-lctx.Done():
		// The release was sent while the lease was live: its end is no
		// loss (see kit.Lease.sentAlive).
		if context.Cause(lctx) != kit.ErrReleased {
			t.Errorf("cause %v, want %v", context.Cause(lctx), kit.ErrReleased)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the Context of a lease whose release failed did not end at its TTL")
	}
	if n := extends.Load(); n != 0 {
		t.Errorf("%d renewals after the failed release", n)
	}
}

// flakyWithdraw fails the first n withdraw scripts it sees as an
// unreachable server would, after letting them reach nothing.
type flakyWithdraw struct {
	backend.Backend
	n, seen atomic.Int32
}

func (f *flakyWithdraw) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s == mutexWithdraw {
		if f.seen.Add(1) <= f.n.Load() {
			return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: connection reset")}
		}
	}
	return f.Backend.Eval(ctx, s, keys, args)
}

// A Lock that gives up takes its place out of the queue even when the
// first withdraw attempts fail on a flaky connection (retried, with a
// pause): a place left behind would be handed the lock, which would then
// sit unconfirmed for the waiter timeout.
func TestWithdrawRetriedOnUnavailable(t *testing.T) {
	m, b := newMiniBackend(t)
	ctx := context.Background()
	holder, err := NewMutex(testClient(t, b), "w", WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	l, err := holder.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	fb := &flakyWithdraw{Backend: b}
	fb.n.Store(3)
	waiter, _ := NewMutex(testClient(t, fb), "w", WithAutoExtend(false))
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := waiter.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a held mutex: %v", err)
	}
	// The retries run in the background: the caller is not held past its
	// deadline.
	q := keyspace.KeyBase(kit.DefaultPrefix, "w") + ":q"
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		members, _ := m.ZMembers(q)
		if fb.seen.Load() == 4 && len(members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d withdraw calls (want 3 failures, then a success), queue %v (want empty)", fb.seen.Load(), members)
		}
	}
}

// TestLayoutNames: the keys and channel a primitive is made with, sliced
// from one string, are each layout's prefix{name}+sub+suffix and
// +sub+":rel", for names KeyBase escapes too, and appending to the keys
// KeysOf returns cannot write over the channel.
func TestLayoutNames(t *testing.T) {
	for _, l := range keyspace.Layouts() {
		for _, name := range []string{"a", "order-12345", "we{ir}d%"} {
			got := l.Names("pre:", name)
			base := keyspace.KeyBase("pre:", name) + l.Sub
			if len(got) != len(l.Keys)+1 {
				t.Fatalf("%s %q: %d names, want %d", l.Kind, name, len(got), len(l.Keys)+1)
			}
			for i, k := range l.Keys {
				if got[i] != base+k.Suffix {
					t.Errorf("%s %q: key %d is %q, want %q", l.Kind, name, i, got[i], base+k.Suffix)
				}
			}
			if ch := got[len(l.Keys)]; ch != l.Channel("pre:", name) {
				t.Errorf("%s %q: channel %q, want %q", l.Kind, name, ch, l.Channel("pre:", name))
			}
			keys := l.KeysOf("pre:", name)
			if cap(keys) != len(l.Keys) {
				t.Errorf("%s: KeysOf has room for %d keys, want exactly %d", l.Kind, cap(keys), len(l.Keys))
			}
		}
	}
}

// TestNewMutexAllocations: a Mutex made per entity name (NewMutex, then
// Lock) is on the uncontended path, so its construction is bounded: its
// config, the struct, its four func values and its keys and channel,
// which take three allocations whatever their number (18 in all when
// each key was its own string).
func TestNewMutexAllocations(t *testing.T) {
	_, b := newMiniBackend(t)
	n := 1e9
	for range 3 { // the least of three: other goroutines allocate now and then
		n = min(n, testing.AllocsPerRun(200, func() {
			if _, err := NewMutex(testClient(t, b), "order-12345"); err != nil {
				t.Fatal(err)
			}
		}))
	}
	if n > 11 {
		t.Errorf("NewMutex: %.0f allocations, want at most 11", n)
	}
}
