package faultproxy

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/latchkit/latchkit/backend"
)

// CheckSilentSubscription is an adapter's check of its subscription health
// check: newBackend makes a backend of addr whose health check runs every
// 100 ms. A subscription whose connection goes silent (a partition: bytes
// held, the connection open) must report itself dropped (its Handler's
// Dropped), so that waiters fall back to their timers; t fails when it is
// not reported within 20 s.
func CheckSilentSubscription(t *testing.T, newBackend func(addr string) backend.Backend) {
	t.Helper()
	px := Start(t, miniredis.RunT(t).Addr())
	b := newBackend(px.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dropped := make(chan error, 1)
	sub, err := b.Subscribe(ctx, backend.Handler{Dropped: func(err error) {
		select {
		case dropped <- err:
		default:
		}
	}})
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
