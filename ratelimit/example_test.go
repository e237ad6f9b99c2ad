package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/ratelimit"
)

// At most 2 calls a second to a partner's API, across every process: the
// third TryTake is refused and says when there is room; Take waits for
// it. The Client and the options are the built-ins'.
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	client, err := primitives.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	limiter, err := ratelimit.New(client, "partner-api", 2, time.Second, primitives.WithPrefix("app:"))
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		err := limiter.TryTake(ctx)
		var full *latchkit.HeldError
		if errors.As(err, &full) {
			fmt.Printf("call %d: wait up to %v\n", i+1, full.WaitHint.Round(time.Second))
			continue
		}
		fmt.Printf("call %d: %v\n", i+1, err)
	}
	start := time.Now()
	if err := limiter.Take(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("waited for room:", time.Since(start) > 900*time.Millisecond)
	// Output:
	// call 1: <nil>
	// call 2: <nil>
	// call 3: wait up to 1s
	// waited for room: true
}
