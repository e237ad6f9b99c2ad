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
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
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

	// The lock key, or its given-back tokens (read while the lock's value
	// says tokens were given back), holds another kind of value: TryLock
	// and Lock fail with ErrInvalid, and neither key changes.
	m, _ := primitives.NewMutex(clienttest.For(t, b), "w", primitives.WithPrefix(p))
	lockKey, goneKey := keyOf(p, "w"), keyOf(p, "w")+":gone"
	const givenBack = "~ 1 g99999999999999" // free, fence 1, tokens given back until the year 5138
	for _, set := range []struct {
		what string
		cmds [][]string
	}{
		{"lock key is a hash", [][]string{{"HSET", lockKey, "f", "v"}}},
		{"given-back tokens are a list", [][]string{{"SET", lockKey, givenBack}, {"RPUSH", goneKey, "x"}}},
		{"given-back tokens are a string", [][]string{{"SET", lockKey, givenBack}, {"SET", goneKey, "abc"}}},
	} {
		for _, c := range set.cmds {
			do(t, b, c[0], c[1], c[2:]...)
		}
		dump := func() string { return snapshot(t, b, lockKey) + snapshot(t, b, goneKey) }
		before := dump()
		for _, lock := range []func(context.Context) (latchkit.Lease, error){m.TryLock, m.Lock} {
			l, err := lock(ctx)
			if !errors.Is(err, latchkit.ErrInvalid) || l != nil {
				t.Errorf("%s: %v, want ErrInvalid", set.what, err)
			}
		}
		if after := dump(); after != before {
			t.Errorf("%s: a refused call changed the keys", set.what)
		}
		do(t, b, "DEL", lockKey, goneKey)
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

// testTTLAtOrBelowDrift: a TTL below primitives.MinTTL makes a lease
// that lives less than half its TTL from the call that granted it (the
// drift allowance, TTL/100 + 2ms, takes the rest), or is lost as soon as
// it is granted, so every constructor that takes WithTTL refuses one, and
// so does Extend: an error matching ErrInvalid that names the least TTL.
// Tried: TTLs of 1ms, 2ms, 2.9ms and MinTTL less 1ns for each primitive,
// under a name nothing else uses, and Extend(2ms) on a live lease. Must
// not have changed: no key of the refused name exists, and the extended
// lease keeps its Context and the TTL it had (not cut to 2ms).
//
// MinTTL itself is accepted by every constructor (a Redlock's derived
// per-instance timeout fits it) and grants a lease whose deadline, when
// its Context ends, is at least half the TTL after the call began (issue
// 38, finding 6); without auto-extend, so that no renewal moves it.
func testTTLAtOrBelowDrift(t *testing.T, h Harness) {
	b := h.NewClient(t).Backend
	// A Redlock's instances must be independent servers (a release finds
	// the lock gone on every instance but the first on a shared one): the
	// suite has one, so its Redlock has one instance.
	others := []backend.Backend{b}
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
			// The long-lived lease gets a second per instance, so that a
			// busy machine does not fail its checks; the short TTLs keep
			// the derived timeout, which must fit them.
			ro := clienttest.Fitting[primitives.RedlockOption](o)
			if n != "tiny" && n != "least" {
				ro = append(ro, primitives.WithInstanceTimeout(time.Second))
			}
			return mutexTry(primitives.NewRedlock(clienttest.All(t, others), n, ro...))
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
		for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 2900 * time.Microsecond, primitives.MinTTL - 1} {
			f, err := k.new("tiny", primitives.WithPrefix(p), primitives.WithTTL(ttl))
			if !errors.Is(err, latchkit.ErrInvalid) || f != nil || !strings.Contains(fmt.Sprint(err), least) {
				t.Errorf("%s with ttl %v: %v, want ErrInvalid naming the least ttl %s", k.what, ttl, err, least)
			}
		}
		// The least TTL itself is accepted, and grants a lease that lives
		// half of it from the call.
		if f, err := k.new("least", primitives.WithPrefix(p), primitives.WithTTL(primitives.MinTTL), primitives.WithAutoExtend(false)); err != nil {
			t.Errorf("%s with ttl %v: %v", k.what, primitives.MinTTL, err)
		} else {
			checkLeastTTL(t, ctx, k.what, f)
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

// checkLeastTTL grants a lease of primitives.MinTTL with try and checks
// that its deadline, when its Context ends, is at least half the TTL after
// the call began. A Redlock's attempt that took too long for the TTL, or
// whose instances did not answer within the per-instance timeout (half the
// TTL: a first call dials), grants nothing and is made again, as a waiting
// Lock would.
func checkLeastTTL(t *testing.T, ctx context.Context, what string, try func(context.Context) (latchkit.Lease, error)) {
	t.Helper()
	for range 100 {
		start := time.Now()
		l, err := try(ctx)
		if err != nil {
			if errors.Is(err, latchkit.ErrUnavailable) {
				// The reply came after the lease's few ms had run out (a
				// busy machine, the race detector), or a Redlock's quorum
				// took longer than the TTL allows: not handed out dead.
				continue
			}
			t.Errorf("%s with ttl %v: %v", what, primitives.MinTTL, err)
			return
		}
		d, ok := latchkit.Innermost(l).(interface{ Deadline() time.Time })
		if !ok {
			t.Fatalf("%s: the lease (%T) has no Deadline", what, latchkit.Innermost(l))
		}
		left := d.Deadline().Sub(start)
		if left < primitives.MinTTL/2 {
			t.Errorf("%s with ttl %v: the lease's Context ends %v after the call began, less than half the ttl", what, primitives.MinTTL, left)
		}
		t.Logf("%s with ttl %v: the lease's Context ends %v after the call began", what, primitives.MinTTL, left)
		// It may have expired meanwhile: a release then reports it lost.
		if err := l.Release(ctx); err != nil && !errors.Is(err, latchkit.ErrLeaseLost) {
			t.Errorf("%s with ttl %v: release: %v", what, primitives.MinTTL, err)
		}
		return
	}
	t.Errorf("%s with ttl %v: no attempt in 100 was granted", what, primitives.MinTTL)
}

// snapshot is key's type and value, as text.
func snapshot(t *testing.T, b backend.Backend, key string) string {
	t.Helper()
	typ := fmt.Sprint(do(t, b, "TYPE", key))
	switch typ {
	case "string":
		return typ + fmt.Sprint(do(t, b, "GET", key))
	case "hash":
		return typ + fmt.Sprint(do(t, b, "HGETALL", key))
	case "list":
		return typ + fmt.Sprint(do(t, b, "LRANGE", key, "0", "-1"))
	case "zset":
		return typ + fmt.Sprint(do(t, b, "ZRANGE", key, "0", "-1", "WITHSCORES"))
	}
	return typ
}
