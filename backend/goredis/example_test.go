package goredis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

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

// go-redis logs its pool's troubles on the process's stderr by itself,
// through one logger for the whole process: while Redis restarts, every
// client's pool prints "connection pool: failed to dial after 5 attempts:
// ..." for its dials. An application (never a library: latchkit does not)
// sets that logger once. Compiled, not run: it changes the process's
// logger.
func Example_logger() {
	// In main, before making clients: drop the lines that contain any of
	// these strings, print the others as before.
	redis.SetLogger(logging.NewBlacklistLogger([]string{"connection pool: failed to dial"}))
	// Or drop every line: logging.Disable(). Or give redis.SetLogger the
	// application's own logger: any value with the method
	// Printf(ctx context.Context, format string, v ...any).
}
