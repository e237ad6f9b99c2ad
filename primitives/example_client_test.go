package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// A program makes one Client per Redis deployment, makes its primitives
// from it, and closes it on shutdown: Close releases what is still held
// (a leadership goes to the next campaigner at once), withdraws the calls
// still waiting, and returns once every goroutine latchkit started has
// ended. Only primitives and an adapter are imported.
func ExampleNewClient() {
	rdb, stop := exampleRedis() // a *redis.Client (go-redis) of the application's
	defer stop()
	ctx := context.Background()

	client, err := primitives.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	mu, _ := primitives.NewMutex(client, "job:42")
	api, _ := primitives.NewFairSemaphore(client, "partner-api", 4)
	el, _ := primitives.NewElection(client, "scheduler")
	ready, _ := primitives.NewLatch(client, "shards-ready")

	lease, err := mu.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fenced:", lease.Fence() > 0) // pass the fence to what the lock guards
	permits, _ := api.AcquireN(ctx, 2)
	defer permits.Release(ctx)
	lead, _ := el.Campaign(ctx, "pod-1")
	fmt.Println("leading:", lead.Context().Err() == nil)
	_, _ = ready.TrySetCount(ctx, 1)
	_ = ready.CountDown(ctx)
	fmt.Println("ready:", ready.Wait(ctx) == nil)

	// Graceful shutdown, bounded: the lock and the leadership are still
	// held, and Close gives them up.
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Close(shutdown); err != nil {
		log.Print(err)
	}
	fmt.Println("lease ended by Close:", errors.Is(context.Cause(lease.Context()), primitives.ErrClosed))
	_, err = mu.TryLock(ctx)
	fmt.Println("calls after Close:", errors.Is(err, primitives.ErrClosed))
	// Output:
	// fenced: true
	// leading: true
	// ready: true
	// lease ended by Close: true
	// calls after Close: true
}
