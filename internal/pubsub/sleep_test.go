package pubsub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/pubsub"
)

// Sleep waits d, or until ctx is done; it returns at once, with
// ctx's error, for d <= 0.
func TestSleep(t *testing.T) {
	if err := pubsub.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	if err := pubsub.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pubsub.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx, 0) = %v", err)
	}
	start := time.Now()
	if err := pubsub.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx, 1h) = %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Sleep on a done ctx took %v", el)
	}
	start = time.Now()
	if err := pubsub.Sleep(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("Sleep(20ms) returned after %v", el)
	}
}
