package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// deadRESP makes a client of a RESP-family driver (rueidis, valkey-go),
// which refuse to create a client for an address that does not answer,
// against a miniredis that is then closed: its address is dead from then
// on.
func deadRESP[C interface{ Close() }](t *testing.T, mk func(addr string) (C, error)) C {
	t.Helper()
	m := miniredis.RunT(t)
	c, err := mk(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	t.Cleanup(c.Close)
	return c
}

// A waiting Lock against a Redis nobody can reach gives up at its
// deadline with an error that says both: the caller's deadline passed
// (context.DeadlineExceeded) and Redis could not be reached
// (latchkit.ErrUnavailable), naming the connection error of the attempts
// before the one the deadline cut short. Issue 28, finding 11: with
// go-redis (as most users configure it, and with ContextTimeoutEnabled)
// the error was only "context deadline exceeded" (the driver ends the cut
// attempt with the context's error alone).
//
// One attempt through a go-redis client as most users configure it lasts
// about 1.7 s against a dead address (the client's own retries: 4 tries
// of the command, each dialing 5 times 100 ms apart). With a 3 s deadline
// one attempt ends first and says what it met. With 300 ms the deadline
// cuts the first attempt short and go-redis says no more than the
// context's error (the caller waiting for a connection, or in the pause
// between the client's retries, is handed ctx.Err(); without
// ContextTimeoutEnabled the adapter gives up on the call at the deadline):
// the adapter, which watches the client's dials, names the failed dial.
// A client configured to fail fast, and the other drivers, 300 ms.
func TestLockDeadlineAgainstDeadRedisSaysUnavailable(t *testing.T) {
	drivers := []struct {
		name     string
		deadline time.Duration
		mk       func(t *testing.T) backend.Backend
	}{
		{"goredis", 3 * time.Second, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t)})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"goredis ContextTimeoutEnabled", 3 * time.Second, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"goredis 300ms", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t)})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"goredis ContextTimeoutEnabled 300ms", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"goredis fail fast", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), DialerRetries: 1, MaxRetries: -1})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"goredis fail fast ContextTimeoutEnabled", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		}},
		{"rueidis", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			return rueidis.New(deadRESP(t, func(addr string) (rd.Client, error) {
				return rd.NewClient(rd.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: true})
			}))
		}},
		{"valkey", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			return valkey.New(deadRESP(t, func(addr string) (vk.Client, error) {
				return vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: true})
			}))
		}},
		{"redigo", 300 * time.Millisecond, func(t *testing.T) backend.Backend {
			addr := redistest.DeadAddr(t)
			p := &redigolib.Pool{Dial: func() (redigolib.Conn, error) { return redigolib.Dial("tcp", addr) }}
			t.Cleanup(func() { p.Close() })
			return redigo.New(p)
		}},
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel() // the go-redis runs wait seconds each
			mu, err := primitives.NewMutex(clienttest.For(t, d.mk(t)), "dead")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), d.deadline)
			defer cancel()
			start := time.Now()
			l, err := mu.Lock(ctx)
			took := time.Since(start)
			if l != nil {
				t.Fatalf("Lock against a dead Redis granted a lease")
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error does not match context.DeadlineExceeded: %v", err)
			}
			if !errors.Is(err, latchkit.ErrUnavailable) {
				t.Errorf("error does not match latchkit.ErrUnavailable: %v", err)
			}
			if err != nil && !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("error does not name the connection error (connection refused): %v", err)
			}
			if took > d.deadline+time.Second {
				t.Errorf("Lock returned %v after it began, its deadline was %v", took, d.deadline)
			}
		})
	}
}
