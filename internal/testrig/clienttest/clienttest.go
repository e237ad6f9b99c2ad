// Package clienttest gives tests a Client (kit.Client, which
// primitives.Client is) per backend, closed when the test ends.
package clienttest

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/kit"
)

// T is what For needs of a test: *testing.T, *testing.B and *rapid.T.
type T interface {
	Helper()
	Cleanup(func())
	Logf(format string, args ...any)
}

type key struct {
	t T
	b backend.Backend
}

var (
	mu      sync.Mutex
	clients = map[key]*kit.Client{}
)

// For returns t's Client over b, made on first use and closed when t ends;
// nil when b is refused (a nil backend, one Validate refuses), so that a
// constructor given it reports ErrInvalid as it would have.
func For(t T, b backend.Backend) *kit.Client {
	t.Helper()
	comparable := b != nil && reflect.TypeOf(b).Comparable()
	k := key{t, b}
	if comparable {
		mu.Lock()
		c := clients[k]
		mu.Unlock()
		if c != nil {
			return c
		}
	}
	c, err := kit.NewClient(b)
	if err != nil {
		return nil
	}
	if comparable {
		mu.Lock()
		if o := clients[k]; o != nil {
			mu.Unlock()
			_ = c.Close(context.Background())
			return o
		}
		clients[k] = c
		mu.Unlock()
	}
	t.Cleanup(func() {
		if comparable {
			mu.Lock()
			delete(clients, k)
			mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Logf("clienttest: close: %v", err)
		}
	})
	return c
}

// All is For of each backend, for a Redlock.
func All(t T, bs []backend.Backend) []*kit.Client {
	t.Helper()
	cs := make([]*kit.Client, len(bs))
	for i, b := range bs {
		cs[i] = For(t, b)
	}
	return cs
}

// Fitting are those of opts, options of the lock family a test shares
// between kinds, that fit family O too (primitives.RedlockOption or
// primitives.LatchOption); the others (such as WithWaiterTimeout for a
// Redlock) are left out, as that family has no use for them.
func Fitting[O, I any](opts []I) []O {
	var out []O
	for _, o := range opts {
		if f, ok := any(o).(O); ok {
			out = append(out, f)
		}
	}
	return out
}
