package contracttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

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
		{"empty prefix", b, "n", []primitives.Option{primitives.WithPrefix("")}},
		{"nil retry policy", b, "n", []primitives.Option{primitives.WithRetry(nil)}},
	}
	for _, c := range bad {
		m, err := primitives.NewMutex(clienttest.For(t, c.b), c.name, append([]primitives.Option{primitives.WithPrefix(p)}, c.opts...)...)
		if !errors.Is(err, latchkit.ErrInvalid) || m != nil {
			t.Errorf("%s: %v, want ErrInvalid and no mutex", c.what, err)
		}
	}
	// Nothing was written for the rejected constructors.
	if v := do(t, b, "EXISTS", keyOf(p, "n")); v != int64(0) {
		t.Errorf("a rejected constructor wrote a key")
	}

	// The lock key, or its finished tokens (which keep its fence while
	// ahead of the clock), holds another kind of value: TryLock and Lock
	// fail with ErrInvalid, and the value is untouched.
	m, _ := primitives.NewMutex(clienttest.For(t, b), "w", primitives.WithPrefix(p))
	lockKey, goneKey := keyOf(p, "w"), keyOf(p, "w")+":gone"
	for _, set := range []struct {
		what, key string
		cmd       []string
		check     []string
		want      backend.Value
	}{
		{"lock key is a hash", lockKey, []string{"HSET", lockKey, "f", "v"}, []string{"HGET", lockKey, "f"}, "v"},
		{"finished tokens are a list", goneKey, []string{"RPUSH", goneKey, "x"}, []string{"LRANGE", goneKey, "0", "-1"}, []backend.Value{"x"}},
		{"finished tokens are a string", goneKey, []string{"SET", goneKey, "abc"}, []string{"GET", goneKey}, "abc"},
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
		if set.key == goneKey {
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
		m, _ := primitives.NewMutex(clienttest.For(t, b), n, primitives.WithPrefix(p))
		l, err := m.TryLock(ctx)
		try("mutex", l, err)
		rw, _ := primitives.NewRWLock(clienttest.For(t, b), n, primitives.WithPrefix(p))
		l, err = rw.TryRLock(ctx)
		try("rwlock", l, err)
		s, _ := primitives.NewSemaphore(clienttest.For(t, b), n, 2, primitives.WithPrefix(p))
		l, err = s.TryAcquire(ctx)
		try("semaphore", l, err)
		fs, _ := primitives.NewFairSemaphore(clienttest.For(t, b), n, 2, primitives.WithPrefix(p))
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
	ml, err := primitives.NewMultiLock(clienttest.For(t, b), names, primitives.WithPrefix(p))
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

// testTTLAtOrBelowDrift: a TTL at or below the drift allowance (TTL/100 +
// 2ms) makes a lease that is lost as soon as it is granted (its Context
// ends before the grant's reply is back), so every constructor that takes
// WithTTL refuses one below primitives.MinTTL, and so does Extend: an
// error matching ErrInvalid that names the least TTL. Tried: TTLs of 1ms,
// 2ms and 2.9ms for each primitive, under a name nothing else uses, and
// Extend(2ms) on a live lease. Must not have changed: no key of the
// refused name exists, and the extended lease keeps its Context and the
// TTL it had (not cut to 2ms).
func testTTLAtOrBelowDrift(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	others := []backend.Backend{b, h.NewClient(t).Backend, h.NewClient(t).Backend}
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	type try func(context.Context) (latchkit.Lease, error)
	mutexTry := func(m primitives.Mutex, err error) (try, error) {
		if err != nil {
			return nil, err
		}
		return m.TryLock, nil
	}
	semTry := func(s primitives.Semaphore, err error) (try, error) {
		if err != nil {
			return nil, err
		}
		return s.TryAcquire, nil
	}
	kinds := []struct {
		what string
		new  func(name string, opts ...primitives.Option) (try, error)
	}{
		{"mutex", func(n string, o ...primitives.Option) (try, error) {
			return mutexTry(primitives.NewMutex(clienttest.For(t, b), n, o...))
		}},
		{"reentrant", func(n string, o ...primitives.Option) (try, error) {
			m, err := primitives.NewReentrantMutex(clienttest.For(t, b), n, o...)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (latchkit.Lease, error) {
				return m.TryLock(primitives.WithOwner(ctx, "owner"))
			}, nil
		}},
		{"rwlock read", func(n string, o ...primitives.Option) (try, error) {
			rw, err := primitives.NewRWLock(clienttest.For(t, b), n, o...)
			if err != nil {
				return nil, err
			}
			return rw.TryRLock, nil
		}},
		{"rwlock write", func(n string, o ...primitives.Option) (try, error) {
			rw, err := primitives.NewRWLock(clienttest.For(t, b), n, o...)
			if err != nil {
				return nil, err
			}
			return rw.TryLock, nil
		}},
		{"semaphore", func(n string, o ...primitives.Option) (try, error) {
			return semTry(primitives.NewSemaphore(clienttest.For(t, b), n, 2, o...))
		}},
		{"fair semaphore", func(n string, o ...primitives.Option) (try, error) {
			return semTry(primitives.NewFairSemaphore(clienttest.For(t, b), n, 2, o...))
		}},
		{"fair mutex", func(n string, o ...primitives.Option) (try, error) {
			return mutexTry(primitives.NewFairMutex(clienttest.For(t, b), n, o...))
		}},
		{"multilock", func(n string, o ...primitives.Option) (try, error) {
			return mutexTry(primitives.NewMultiLock(clienttest.For(t, b), []string{n, n + "-2"}, o...))
		}},
		{"redlock", func(n string, o ...primitives.Option) (try, error) {
			// For the short TTLs, a per-instance timeout below them, so
			// that only the TTL itself is at fault.
			to := time.Second
			if n == "tiny" || n == "least" {
				to = 900 * time.Microsecond
			}
			return mutexTry(primitives.NewRedlock(clienttest.All(t, others), n, append(clienttest.Fitting[primitives.RedlockOption](o), primitives.WithInstanceTimeout(to))...))
		}},
		{"election", func(n string, o ...primitives.Option) (try, error) {
			e, err := primitives.NewElection(clienttest.For(t, b), n, o...)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, "me") }, nil
		}},
	}
	least := primitives.MinTTL.String()
	for _, k := range kinds {
		for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 2900 * time.Microsecond} {
			f, err := k.new("tiny", primitives.WithPrefix(p), primitives.WithTTL(ttl))
			if !errors.Is(err, latchkit.ErrInvalid) || f != nil || !strings.Contains(fmt.Sprint(err), least) {
				t.Errorf("%s with ttl %v: %v, want ErrInvalid naming the least ttl %s", k.what, ttl, err, least)
			}
		}
		// The least TTL itself is accepted.
		if _, err := k.new("least", primitives.WithPrefix(p), primitives.WithTTL(primitives.MinTTL)); err != nil {
			t.Errorf("%s with ttl %v: %v", k.what, primitives.MinTTL, err)
		}

		f, err := k.new(k.what, primitives.WithPrefix(p), primitives.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", k.what, err)
		}
		l, err := f(ctx)
		if err != nil {
			t.Fatalf("%s: %v", k.what, err)
		}
		for _, ttl := range []time.Duration{2 * time.Millisecond, primitives.MinTTL - 1} {
			if err := l.Extend(ctx, ttl); !errors.Is(err, latchkit.ErrInvalid) || !strings.Contains(fmt.Sprint(err), least) {
				t.Errorf("%s: Extend(%v): %v, want ErrInvalid naming the least ttl %s", k.what, ttl, err, least)
			}
		}
		if err := l.Context().Err(); err != nil {
			t.Errorf("%s: a refused Extend ended the lease: %v", k.what, context.Cause(l.Context()))
		}
		if d, err := l.TTL(ctx); err != nil || d < 50*time.Second {
			t.Errorf("%s: after a refused Extend the lease has %v left (%v), want about a minute", k.what, d, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: release: %v", k.what, err)
		}
	}
	// Nothing was written for the refused constructors.
	for _, key := range []string{keyOf(p, "tiny"), keyOf(p, "tiny") + ":gone", keyOf(p, "tiny-2")} {
		if v := do(t, b, "EXISTS", key); v != int64(0) {
			t.Errorf("a refused constructor wrote %s", key)
		}
	}
}
