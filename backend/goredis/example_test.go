package goredis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// Example locks a name over a go-redis client. A *redis.ClusterClient, or
// the Sentinel-backed client of redis.NewFailoverClient, is given to New
// the same way.
func Example() {
	m, err := miniredis.Run() // an embedded Redis; in production, your server
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	// With ContextTimeoutEnabled go-redis honours context deadlines itself;
	// without it the adapter bounds each call on a goroutine of its own.
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	// One Client per Redis, shared by the primitives made from it, and
	// closed on shutdown: it releases what is still held and ends its
	// goroutines (see primitives.NewClient for a bounded shutdown).
	cl, err := primitives.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mu, _ := primitives.NewMutex(cl, "invoice:42")
	lease, err := mu.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held", lease.Name(), "fenced:", lease.Fence() > 0)
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: held invoice:42 fenced: true
}
