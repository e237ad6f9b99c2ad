package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/primitives"
)

// target is where latchctl connects: -addr, or an embedded miniredis.
type target struct {
	addr   string // empty: embedded
	driver string // goredis, rueidis, valkey or redigo
	mini   *miniredis.Miniredis

	verbose bool      // -v: show the drivers' own log lines
	stderr  io.Writer // where they go then
}

// open starts the embedded server when no address was given, and routes
// the drivers' own log lines (to stderr with -v, else nowhere) until
// close.
func (t *target) open() error {
	switch t.driver {
	case "goredis", "rueidis", "valkey", "redigo":
	default:
		return fmt.Errorf("%w: -driver %q: want goredis, rueidis, valkey or redigo", errUsage, t.driver)
	}
	if t.verbose && t.stderr != nil {
		driverLog.to(t.stderr)
	} else {
		driverLog.to(nil)
	}
	if t.addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		t.mini = m
	}
	return nil
}

func (t *target) address() string {
	if t.mini != nil {
		return t.mini.Addr()
	}
	return t.addr
}

// describe names the server for reports.
func (t *target) describe() string {
	if t.mini != nil {
		return "embedded miniredis"
	}
	return t.addr
}

// client opens one client (its own connections, like a separate process)
// as a backend, and a function that runs one plain command for the demo's
// data. close releases it.
func (t *target) client(ctx context.Context) (backend.Backend, func(context.Context, ...string) (any, error), func(), error) {
	if t.driver == "redigo" {
		return t.redigoClient(ctx)
	}
	if t.driver == "valkey" {
		return t.valkeyClient()
	}
	if t.driver == "rueidis" {
		c, err := rd.NewClient(rd.ClientOption{
			InitAddress:  []string{t.address()},
			DisableCache: t.mini != nil, // miniredis: no CLIENT TRACKING
			AlwaysRESP2:  t.mini != nil, // miniredis: RESP3 pub/sub quirk
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("connect to %s: %w", t.address(), err)
		}
		do := func(ctx context.Context, args ...string) (any, error) {
			v, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToAny()
			if rd.IsRedisNil(err) {
				return nil, nil
			}
			return v, err
		}
		return lrueidis.New(c), do, c.Close, nil
	}
	c := redis.NewClient(&redis.Options{
		Addr:                  t.address(),
		ContextTimeoutEnabled: true, // otherwise go-redis ignores ctx deadlines
		DialTimeout:           2 * time.Second,
		PoolSize:              32,
	})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", t.address(), err)
	}
	do := func(ctx context.Context, args ...string) (any, error) {
		a := make([]any, len(args))
		for i, s := range args {
			a[i] = s
		}
		v, err := c.Do(ctx, a...).Result()
		if err == redis.Nil {
			return nil, nil
		}
		return v, err
	}
	return goredis.New(c), do, func() { c.Close() }, nil
}

func (t *target) close() {
	if t.mini != nil {
		t.mini.Close()
	}
	driverLog.to(nil) // a pool's goroutines still running print nothing more
}

// closeTimeout bounds closeClients: releasing what a Client still holds
// and ending its subscription take a round trip each, and a server that
// stopped answering must not keep latchctl from exiting (a lease not
// released by then expires with its TTL).
const closeTimeout = 5 * time.Second

// closeClients closes the primitives' Clients, together, within
// closeTimeout, even after ctx ended (Ctrl-C): what they still hold is
// released rather than left to expire, and their goroutines are gone when
// it returns. Call it before the backends' own clients close.
func closeClients(ctx context.Context, cls ...*primitives.Client) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	errs := make([]error, len(cls))
	var wg sync.WaitGroup
	for i, cl := range cls {
		if cl != nil {
			wg.Go(func() { errs[i] = cl.Close(ctx) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close latchkit client: %w", err)
	}
	return nil
}
