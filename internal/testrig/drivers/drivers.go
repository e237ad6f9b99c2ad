// Package drivers makes a backend of a server's address with each of the
// four adapters, with the drivers' defaults (client-side caching off, for
// miniredis): for tests that run one check on every driver.
package drivers

import (
	"context"
	"net"
	"testing"
	"time"

	rg "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lredigo "github.com/latchkit/latchkit/backend/redigo"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
)

// Driver is one adapter: its name and how to make a backend of addr,
// closed when the test ends.
type Driver struct {
	Name string
	New  func(t testing.TB, addr string) backend.Backend
}

// All are the four adapters.
var All = []Driver{
	{"go-redis", func(t testing.TB, addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	}},
	{"rueidis", func(t testing.TB, addr string) backend.Backend {
		c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{addr}, Dialer: net.Dialer{Timeout: time.Second}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lrueidis.New(c)
	}},
	{"valkey", func(t testing.TB, addr string) backend.Backend {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, Dialer: net.Dialer{Timeout: time.Second}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lvalkey.New(c)
	}},
	{"redigo", func(t testing.TB, addr string) backend.Backend {
		p := &rg.Pool{DialContext: func(ctx context.Context) (rg.Conn, error) { return rg.DialContext(ctx, "tcp", addr) }, MaxIdle: 8}
		t.Cleanup(func() { p.Close() })
		return lredigo.New(p)
	}},
}

// Defaults are the four adapters over their drivers as a user writes them
// from each driver's own documentation: every default kept (go-redis
// ignores contexts, rueidis and valkey-go keep client-side caching on,
// redigo's pool has no timeout of any kind). Tests of how latchkit meets a
// hung or dead server run on them.
var Defaults = []Driver{
	{"go-redis (default options)", func(t testing.TB, addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	}},
	{"rueidis (default options)", func(t testing.TB, addr string) backend.Backend {
		c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lrueidis.New(c)
	}},
	{"valkey (default options)", func(t testing.TB, addr string) backend.Backend {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lvalkey.New(c)
	}},
	{"redigo (default options)", func(t testing.TB, addr string) backend.Backend {
		p := &rg.Pool{Dial: func() (rg.Conn, error) { return rg.Dial("tcp", addr) }, MaxIdle: 3, IdleTimeout: 240 * time.Second}
		t.Cleanup(func() { p.Close() })
		return lredigo.New(p)
	}},
}
