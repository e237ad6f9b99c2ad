package kit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/primitives"
)

// A primitive of one's own: a quota of n entries per name for an hour,
// shared by processes. Its layout names its keys, its attempt script
// follows the attempt header (token, waiter timeout, then the
// acquisition's Args), and the kit runs it through the wait loop with the
// built-ins' Client and options. (A real primitive embeds its lua
// directory: see package ratelimit.)
func Example() {
	scripts := fstest.MapFS{"lua/quota_take.lua": {Data: []byte(`--@uses now_ms
--@keys used
-- ARGV: the attempt header (1 token .. 5 retention ms), 6 the quota.
-- Reply: {1, entries} taken (also by an earlier try of this token); {0, hint ms, false} used up.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return {1, redis.call('HLEN', KEYS[1])} end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then return {0, redis.call('PTTL', KEYS[1]), false} end
redis.call('HSET', KEYS[1], ARGV[1], now_ms())
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], 3600000) end
return {1, redis.call('HLEN', KEYS[1])}
`)}}
	layout := kit.Layout{Kind: "quota", Keys: []kit.Key{{Name: "used", Suffix: ":quota", Type: "hash"}}}
	take := kit.MustLoad(scripts, &layout, "quota_take")

	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	client, err := kit.NewClient(goredis.New(rdb)) // the same Client the built-ins take (primitives.NewClient)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	site, err := kit.NewSite(client, &layout, "exports", primitives.WithPrefix("app:"))
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err := site.Acquire(ctx, kit.Acquisition{Op: "Take", Try: true, Attempt: take, Args: []string{"2"}})
		var held *latchkit.HeldError
		if errors.As(err, &held) {
			fmt.Printf("take %d: used up for %v\n", i+1, held.WaitHint.Round(time.Hour))
			continue
		}
		fmt.Printf("take %d: %v\n", i+1, err)
	}
	fmt.Println(site.Key("used"))
	// Output:
	// take 1: <nil>
	// take 2: <nil>
	// take 3: used up for 1h0m0s
	// app:{exports}:quota
}
