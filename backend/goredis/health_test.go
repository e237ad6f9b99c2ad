package goredis_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
)

// TestBoundSubscriptionHealthCheck (issue 38, finding 11; the bound
// WithHealthCheck of docs/bounds.md, 5 s by default, 100 ms here): a
// subscription whose connection goes silent (a partition: bytes held,
// the connection open) is probed with a PING after the interval and,
// unanswered for as long again, reports itself dropped, so that waiters
// fall back to their timers.
func TestBoundSubscriptionHealthCheck(t *testing.T) {
	px := faultproxy.Start(t, miniredis.RunT(t).Addr())
	c := redis.NewClient(&redis.Options{Addr: px.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	b := goredis.New(c, goredis.WithHealthCheck(100*time.Millisecond))
	ctx := ctxT(t, 20*time.Second)
	dropped := make(chan error, 1)
	sub, err := b.Subscribe(ctx, backend.Handler{Dropped: func(err error) { dropped <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Add(ctx, "ch"); err != nil {
		t.Fatal(err)
	}
	px.Blackhole(true)
	defer px.Blackhole(false)
	select {
	case <-dropped:
	case <-ctx.Done():
		t.Fatal("a silent subscription was never reported dropped")
	}
}
