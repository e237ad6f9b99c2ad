package redigo_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// TestSubscriptionHealthy: a subscription's health check PINGs a live
// server without ever reading the answer as a loss, whether the connection
// has channels (the server answers in pub/sub form) or none (it answers
// +PONG, as outside pub/sub mode), and a message still arrives after many
// pings.
func TestSubscriptionHealthy(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
		"redis-server": func(t *testing.T) string { return redistest.Start(t).Addr },
	}
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			addr := start(t)
			p := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
			defer p.Close()
			// Short, but not so short that a busy machine's scheduling
			// delays alone leave the connection silent for two intervals.
			const health = 100 * time.Millisecond
			b := redigo.New(p, redigo.WithHealthCheck(health))
			ctx := ctxT(t, 10*time.Second)
			dropped := make(chan error, 1)
			msgs := make(chan backend.Message, 1)
			sub, err := b.Subscribe(ctx, backend.Handler{
				Message: func(m backend.Message) { msgs <- m },
				Dropped: func(err error) { dropped <- err },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			check := func(when string) {
				select {
				case err := <-dropped:
					t.Fatalf("%s: dropped: %v", when, err)
				case <-time.After(3 * health):
				}
			}
			check("no channel yet")
			if err := sub.Add(ctx, "ch"); err != nil {
				t.Fatal(err)
			}
			check("one channel")
			if err := sub.Remove(ctx, "ch"); err != nil {
				t.Fatal(err)
			}
			check("no channel any more")
			if err := sub.Add(ctx, "ch"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Eval(ctx, backend.NewScript(`return redis.call('PUBLISH', ARGV[1], ARGV[2])`), nil, []string{"ch", "hi"}); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-msgs:
				if m != (backend.Message{Channel: "ch", Payload: "hi"}) {
					t.Errorf("got %+v", m)
				}
			case err := <-dropped:
				t.Fatalf("dropped: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("no message")
			}
		})
	}
}
