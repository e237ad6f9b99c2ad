package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// A fenced lock with loss handling: take the lock, do the work under the
// lease's Context (it ends if the lease is lost), give the fence to the
// store the lock protects, and close the Client on shutdown.
func Example() {
	rdb, stop := exampleRedis() // your *redis.Client (go-redis); rueidis, valkey-go and redigo work the same
	defer stop()
	ctx := context.Background()

	client, err := primitives.NewClient(goredis.New(rdb)) // one per Redis deployment
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx) // releases what is still held, stops every goroutine

	mu, err := primitives.NewMutex(client, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Lock(ctx) // waits until granted, or until ctx ends
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The store refuses a write whose fence is below one it has seen: a
	// holder that lost the lock (paused past its TTL) cannot overwrite.
	err = saveInvoice(lease.Context(), lease.Fence())
	if errors.Is(context.Cause(lease.Context()), primitives.ErrLeaseLost) {
		log.Print("lost the lock mid-work: ", err)
	}
	fmt.Println("saved:", err == nil)
	// Output: saved: true
}

// saveInvoice stands for a write to the store the lock protects, carrying
// the fence.
func saveInvoice(ctx context.Context, fence int64) error {
	if fence <= 0 {
		return errors.New("no fence")
	}
	return ctx.Err()
}
