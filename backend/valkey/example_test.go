package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/primitives"
)

// Example locks a name over a valkey-go client. The server here is an
// embedded miniredis, which needs DisableCache and AlwaysRESP2; against
// Valkey or Redis the client needs only InitAddress (or Sentinel, or the
// addresses of a Cluster).
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// One Client per Redis, shared by the primitives made from it.
	cl, err := primitives.NewClient(lvalkey.New(client))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // on shutdown: releases what is still held, stops its goroutines
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cl.Close(ctx); err != nil {
			log.Print(err)
		}
	}()

	mu, err := primitives.NewMutex(cl, "invoice:42", primitives.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := mu.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Do the work under lease.Context(): it ends if the lease is lost.
	_, err = mu.TryLock(ctx)
	fmt.Println("held:", errors.Is(err, latchkit.ErrNotAcquired))
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// held: true
}
