package goredis_test

import (
	"testing"
	"time"

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
	faultproxy.CheckSilentSubscription(t, func(addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c, goredis.WithHealthCheck(100*time.Millisecond))
	})
}
