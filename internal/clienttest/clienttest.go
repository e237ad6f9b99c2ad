// Package clienttest gives tests a primitives.Client per backend, closed
// when the test ends.
package clienttest

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
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
	clients = map[key]*primitives.Client{}
)

// For returns t's Client over b, made on first use and closed when t ends;
// nil when b is refused (a nil backend, one Validate refuses), so that a
// constructor given it reports ErrInvalid as it would have.
func For(t T, b backend.Backend) *primitives.Client {
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
	c, err := primitives.NewClient(b)
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
func All(t T, bs []backend.Backend) []*primitives.Client {
	t.Helper()
	cs := make([]*primitives.Client, len(bs))
	for i, b := range bs {
		cs[i] = For(t, b)
	}
	return cs
}

// RedlockOptions are those of opts, options of the lock family a test
// shares between kinds, that fit a Redlock too; the others (such as
// WithWaiterTimeout) are left out, as a Redlock has no use for them.
func RedlockOptions(opts []primitives.Option) []primitives.RedlockOption {
	var out []primitives.RedlockOption
	for _, o := range opts {
		if r, ok := o.(primitives.RedlockOption); ok {
			out = append(out, r)
		}
	}
	return out
}

// LatchOptions are those of opts that fit a Latch (see RedlockOptions).
func LatchOptions(opts []primitives.Option) []primitives.LatchOption {
	var out []primitives.LatchOption
	for _, o := range opts {
		if l, ok := o.(primitives.LatchOption); ok {
			out = append(out, l)
		}
	}
	return out
}
