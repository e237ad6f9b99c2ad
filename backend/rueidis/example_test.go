package rueidis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	rd "github.com/redis/rueidis"

	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/primitives"
)

// Example locks a name over a rueidis client. The server here is an
// embedded miniredis, which needs DisableCache and AlwaysRESP2; against
// Redis the client needs only InitAddress (or Sentinel, or the addresses
// of a Cluster).
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client, err := rd.NewClient(rd.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// One Client per Redis, shared by the primitives made from it, and
	// closed on shutdown: it releases what is still held and ends its
	// goroutines (see primitives.NewClient for a bounded shutdown).
	cl, err := primitives.NewClient(lrueidis.New(client))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(context.Background())

	// Give calls a deadline: without one, rueidis may retry a read-only
	// command to an unreachable server indefinitely.
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
