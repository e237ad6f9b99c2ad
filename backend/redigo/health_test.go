package redigo_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/redigo"
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
		p := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
		t.Cleanup(func() { p.Close() })
		return redigo.New(p, redigo.WithHealthCheck(100*time.Millisecond))
	})
}
