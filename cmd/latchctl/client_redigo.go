package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/internal/redigoreply"
)

// redigoClient is target.client for -driver redigo: a pool of connections
// dialed with the caller's context.
func (t *target) redigoClient(ctx context.Context) (backend.Backend, func(context.Context, ...string) (any, error), func(), error) {
	addr := t.address()
	p := &redis.Pool{
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(2*time.Second))
		},
		MaxIdle:     32,
		IdleTimeout: time.Minute,
	}
	do := func(ctx context.Context, args ...string) (any, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("redigo: no command")
		}
		c, err := p.GetContext(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		a := make([]any, len(args)-1)
		for i, s := range args[1:] {
			a[i] = s
		}
		v, err := redis.DoContext(c, ctx, args[0], a...)
		if err != nil {
			return nil, err
		}
		return redigoreply.Normalize(v)
	}
	if _, err := do(ctx, "PING"); err != nil {
		p.Close()
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return redigo.New(p), do, func() { p.Close() }, nil
}
