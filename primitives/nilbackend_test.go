package primitives_test

import (
	"errors"
	"testing"

	redigolib "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// userBackend stands for a third-party adapter, whose typed nil a caller
// may pass: latchkit's own adapters' types are unexported, and their New
// of a nil client returns a nil interface.
type userBackend struct{ backend.Backend }

// A nil backend in every form (a nil interface, a typed nil of an
// adapter's type, each adapter's New of a nil client, or of a typed nil
// client) is refused by every constructor with an error matching
// ErrInvalid: no panic. Nothing can have been written (there is no
// server).
func TestNilBackends(t *testing.T) {
	nils := map[string]func() backend.Backend{
		"nil interface":           func() backend.Backend { return nil },
		"typed nil adapter":       func() backend.Backend { var b *userBackend; return b },
		"goredis.New(nil)":        func() backend.Backend { return goredis.New(nil) },
		"goredis.New(nil client)": func() backend.Backend { var c *redis.Client; return goredis.New(c) },
		"rueidis.New(nil)":        func() backend.Backend { var c rd.Client; return rueidis.New(c) },
		"valkey.New(nil)":         func() backend.Backend { var c vk.Client; return valkey.New(c) },
		"redigo.New(nil)":         func() backend.Backend { var p *redigolib.Pool; return redigo.New(p) },
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	t.Cleanup(func() { c.Close() })
	ok := goredis.New(c)
	ctors := map[string]func(b backend.Backend) (any, error){
		"NewMutex":          func(b backend.Backend) (any, error) { return primitives.NewMutex(clienttest.For(t, b), "x") },
		"NewReentrantMutex": func(b backend.Backend) (any, error) { return primitives.NewReentrantMutex(clienttest.For(t, b), "x") },
		"NewRWLock":         func(b backend.Backend) (any, error) { return primitives.NewRWLock(clienttest.For(t, b), "x") },
		"NewSemaphore":      func(b backend.Backend) (any, error) { return primitives.NewSemaphore(clienttest.For(t, b), "x", 2) },
		"NewFairSemaphore":  func(b backend.Backend) (any, error) { return primitives.NewFairSemaphore(clienttest.For(t, b), "x", 2) },
		"NewFairMutex":      func(b backend.Backend) (any, error) { return primitives.NewFairMutex(clienttest.For(t, b), "x") },
		"NewMultiLock": func(b backend.Backend) (any, error) {
			return primitives.NewMultiLock(clienttest.For(t, b), []string{"x", "y"})
		},
		"NewElection": func(b backend.Backend) (any, error) { return primitives.NewElection(clienttest.For(t, b), "x") },
		"NewLatch":    func(b backend.Backend) (any, error) { return primitives.NewLatch(clienttest.For(t, b), "x") },
		"NewRedlock first": func(b backend.Backend) (any, error) {
			return primitives.NewRedlock(clienttest.All(t, []backend.Backend{b}), "x")
		},
		"NewRedlock second": func(b backend.Backend) (any, error) {
			return primitives.NewRedlock(clienttest.All(t, []backend.Backend{ok, b, ok}), "x")
		},
	}
	for what, mk := range nils {
		for name, ctor := range ctors {
			err := apicover.NoPanic(func() error { _, err := ctor(mk()); return err })
			if !errors.Is(err, latchkit.ErrInvalid) {
				t.Errorf("%s(%s): %v, want an error matching ErrInvalid", name, what, err)
			}
		}
	}
}
