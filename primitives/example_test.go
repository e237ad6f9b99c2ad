package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/retry"
)

// exampleRedis starts an embedded Redis for the examples; in production the
// client points at your Redis.
func exampleRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{
		Addr:                  m.Addr(),
		ContextTimeoutEnabled: true, // without it go-redis ignores ctx deadlines
	})
	return c, func() { c.Close(); m.Close() }
}

// exampleClient is a Client over exampleRedis, and the function that
// closes both (see ExampleNewClient for a Client's life in a program).
func exampleClient() (*primitives.Client, func()) {
	rdb, stop := exampleRedis()
	cl, err := primitives.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	return cl, func() {
		_ = cl.Close(context.Background())
		stop()
	}
}

func ExampleNewMutex() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	mu, err := primitives.NewMutex(cl, "invoice:42", primitives.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Do the work under lease.Context(): it ends if the lease is lost.
	// Hand lease.Fence() to the store you write to, so that it can refuse
	// a writer whose lease has been taken over.
	first := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}

	lease, _ = mu.Lock(ctx)
	// Fences strictly increase from grant to grant (they are never below
	// the server's clock in microseconds, so they keep increasing even
	// across a Redis that lost its data).
	fmt.Println("next fence above the first:", lease.Fence() > first)
	_ = lease.Release(ctx)
	// Output:
	// next fence above the first: true
}

func ExampleMutex_TryLock() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	a, _ := primitives.NewMutex(cl, "report")
	other, _ := primitives.NewMutex(cl, "report")

	held, _ := a.TryLock(ctx)
	_, err := other.TryLock(ctx)
	fmt.Println("second TryLock:", errors.Is(err, latchkit.ErrNotAcquired))
	_ = held.Release(ctx)
	// Output:
	// second TryLock: true
}

func ExampleWithRetry() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	holder, _ := primitives.NewMutex(cl, "job")
	held, _ := holder.TryLock(ctx)
	defer held.Release(ctx)

	// Give up after three attempts instead of waiting for ctx.
	impatient, _ := primitives.NewMutex(cl, "job",
		primitives.WithRetry(retry.MaxAttempts(retry.Constant(10*time.Millisecond), 3)))
	_, err := impatient.Lock(ctx)
	fmt.Println(errors.Is(err, latchkit.ErrNotAcquired))
	// Output:
	// true
}

// WithReplicaAck makes a grant count only once a replica has it. The
// embedded Redis here has no replica, so the grant is refused and given
// back; against a Sentinel- or Cluster-managed master with a healthy
// replica it succeeds, and survives the master's failover.
func ExampleWithReplicaAck() {
	cl, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	mu, err := primitives.NewMutex(cl, "ledger",
		primitives.WithReplicaAck(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	// TryLock makes one attempt; Lock would try again until a replica
	// acknowledged a grant or its context ended.
	_, err = mu.TryLock(ctx)
	fmt.Println(errors.Is(err, primitives.ErrNotReplicated))
	// Output: true
}

// A coordinator waits until every shard is loaded: it sets the latch to
// the number of shards, each loader counts it down once, and Wait returns
// when the count reaches zero (woken by the last CountDown's message, not
// by polling). The loaders may run in other processes: they share only
// the latch's name.
func ExampleNewLatch() {
	cl, stop := exampleClient()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	loaded, err := primitives.NewLatch(cl, "shards-loaded")
	if err != nil {
		log.Fatal(err)
	}
	ok, err := loaded.TrySetCount(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("set:", ok)

	var loaders sync.WaitGroup
	defer loaders.Wait() // (before the embedded Redis stops)
	for shard := 0; shard < 3; shard++ {
		loaders.Add(1)
		go func() {
			defer loaders.Done()
			// ... load the shard, then:
			l, _ := primitives.NewLatch(cl, "shards-loaded")
			if err := l.CountDown(ctx); err != nil {
				log.Print(err) // an error leaves the outcome unknown: it may have counted
			}
		}()
	}
	if err := loaded.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	n, _ := loaded.Count(ctx)
	fmt.Println("all loaded, count:", n)

	// At zero the latch can be set again for the next round.
	ok, _ = loaded.TrySetCount(ctx, 2)
	fmt.Println("set again:", ok)
	// Output:
	// set: true
	// all loaded, count: 0
	// set again: true
}
