package primitives

import (
	"context"
	"reflect"
	"sync"

	"github.com/latchkit/latchkit/backend"
)

// testClient is t's Client over b, made on first use and closed when t
// ends (nil when b is refused, so that a constructor reports ErrInvalid as
// it would have). Tests outside this package use internal/testrig/clienttest,
// which imports this package and so cannot serve its own tests.
func testClient(t interface{ Cleanup(func()) }, b backend.Backend) *Client {
	type key struct {
		t any
		b backend.Backend
	}
	shared := b != nil && reflect.TypeOf(b).Comparable()
	k := key{t, b}
	if shared {
		if c, ok := testClients_.Load(k); ok {
			return c.(*Client)
		}
	}
	c, err := NewClient(b)
	if err != nil {
		return nil
	}
	if shared {
		if o, loaded := testClients_.LoadOrStore(k, c); loaded {
			return o.(*Client)
		}
	}
	t.Cleanup(func() {
		testClients_.Delete(k)
		_ = c.Close(context.Background())
	})
	return c
}

// testClients_ holds the Clients testClient made, by test and backend.
var testClients_ sync.Map

// redlockOptions are those of opts, the lock family's, that fit a
// Redlock (see clienttest.RedlockOptions).
func redlockOptions(opts []Option) []RedlockOption {
	var out []RedlockOption
	for _, o := range opts {
		if r, ok := o.(RedlockOption); ok {
			out = append(out, r)
		}
	}
	return out
}

// testClients is testClient of each backend, for a Redlock.
func testClients(t interface{ Cleanup(func()) }, bs []backend.Backend) []*Client {
	cs := make([]*Client, len(bs))
	for i, b := range bs {
		cs[i] = testClient(t, b)
	}
	return cs
}
