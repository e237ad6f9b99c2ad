package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
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
	mu, err := primitives.NewMutex(client, "job:42")
	check(err)
	api, err := primitives.NewFairSemaphore(client, "partner-api", 4)
	check(err)
	el, err := primitives.NewElection(client, "scheduler")
	check(err)
	ready, err := primitives.NewLatch(client, "shards-ready")
	check(err)

	lease, err := mu.Lock(ctx)
	check(err)
	fmt.Println("fenced:", lease.Fence() > 0) // pass the fence to what the lock guards
	permits, err := api.AcquireN(ctx, 2)
	check(err)
	defer permits.Release(ctx)
	lead, err := el.Campaign(ctx, "pod-1")
	check(err)
	fmt.Println("leading:", lead.Context().Err() == nil)
	_, err = ready.TrySetCount(ctx, 1)
	check(err)
	check(ready.CountDown(ctx))
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
	_, err = primitives.NewMutex(client, "job:43")
	fmt.Println("constructors after Close:", errors.Is(err, primitives.ErrClosed))
	// Output:
	// fenced: true
	// leading: true
	// ready: true
	// lease ended by Close: true
	// calls after Close: true
	// constructors after Close: true
}

// check stops the example on an error (a program would handle it).
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// Behind a proxy that refuses SUBSCRIBE (twemproxy, Envoy's Redis proxy),
// a Client made WithWakeUps(false) never subscribes: its waiters poll,
// attempting again when the holder's time runs out or after the retry
// policy's delay, whichever comes first.
func ExampleWithWakeUps() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	client, err := primitives.NewClient(goredis.New(rdb), primitives.WithWakeUps(false))
	check(err)
	defer client.Close(ctx)
	mu, err := primitives.NewMutex(client, "job:42", primitives.WithRetry(retry.Constant(20*time.Millisecond)))
	check(err)

	held, err := mu.Lock(ctx)
	check(err)
	go func() {
		time.Sleep(50 * time.Millisecond)
		held.Release(ctx)
	}()
	next, err := mu.Lock(ctx) // polls every 20 ms until the release
	check(err)
	fmt.Println("fence increased:", next.Fence() > held.Fence())
	check(next.Release(ctx))
	// Output:
	// fence increased: true
}
