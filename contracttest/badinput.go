package contracttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
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
