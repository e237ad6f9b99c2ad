package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	lredigo "github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/internal/floor"
)

// floorRedigo is the floor of the redigo contenders.
const floorRedigo = "floor (SET NX PX + EVALSHA del), redigo"

// newRedigo opens a redigo pool whose commands are counted in sent.
func newRedigo(addr string, sent *atomic.Int64) *redis.Pool {
	return &redis.Pool{
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			c, err := redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(5*time.Second))
			if err != nil {
				return nil, err
			}
			return countedRedigo{Conn: c, n: sent}, nil
		},
		MaxIdle: 128, // S2 runs 64 goroutines on one client
	}
}

// countedRedigo counts the commands sent on a redigo connection.
type countedRedigo struct {
	redis.Conn
	n *atomic.Int64
}

func (c countedRedigo) count(cmd string) {
	if cmd != "" { // "" flushes what Send queued, already counted
		c.n.Add(1)
	}
}

func (c countedRedigo) Do(cmd string, args ...any) (any, error) {
	c.count(cmd)
	return c.Conn.Do(cmd, args...)
}

func (c countedRedigo) Send(cmd string, args ...any) error {
	c.count(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c countedRedigo) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.count(cmd)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c countedRedigo) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.count(cmd)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c countedRedigo) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c countedRedigo) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

// casDelRedigo is the floor's release, run by EVALSHA (EVAL on NOSCRIPT).
var casDelRedigo = redis.NewScript(1, floor.CasDelSource)

func openFloorRedigo(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	p := newRedigo(addrs[0], sent)
	ms := ttl.Milliseconds()
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			c, err := p.GetContext(ctx)
			if err != nil {
				return nil, fmt.Errorf("SET NX %s: %w", key, err)
			}
			defer c.Close()
			v, err := redis.DoContext(c, ctx, "SET", key, tok, "NX", "PX", ms)
			if err != nil {
				return nil, fmt.Errorf("SET NX %s: %w", key, err)
			}
			if v == nil {
				return nil, errBusy
			}
			return func(ctx context.Context) error {
				c, err := p.GetContext(ctx)
				if err == nil {
					_, err = casDelRedigo.DoContext(ctx, c, key, tok)
					c.Close()
				}
				if err != nil {
					return fmt.Errorf("compare-and-delete %s: %w", key, err)
				}
				return nil
			}, nil
		},
		close: func() { p.Close() },
	}, nil
}

func redigoBackend(_ context.Context, addr string, sent *atomic.Int64) (backend.Backend, func(), error) {
	p := newRedigo(addr, sent)
	return lredigo.New(p), func() { p.Close() }, nil
}
