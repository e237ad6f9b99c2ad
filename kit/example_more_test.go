package kit_test

import (
	"context"
	"fmt"
	"log"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/kit"
)

// gate is a primitive without grants: a gate that opens once, for an hour,
// and calls that wait for it.
var (
	gateLayout = kit.Layout{Kind: "gate", Keys: []kit.Key{{Name: "open", Suffix: ":gate", Type: "string"}}}
	gateFS     = fstest.MapFS{
		// ARGV: the call header (1 call id, 2 the release channel, 3
		// retention ms). Reply: 1 opened by this call (or by an earlier
		// try of it), 0 open already.
		"lua/gate_open.lua": {Data: []byte(`--@keys open
local by = redis.call('GET', KEYS[1])
if by then return by == ARGV[1] and 1 or 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 3600000)
redis.pcall('PUBLISH', ARGV[2], '$WAKE_ALL')
return 1
`)},
		// Reply: -1 open, else how long the gate may stay shut (ms, a
		// bound for the waiter's sleep).
		"lua/gate_read.lua": {Data: []byte(`--@keys open
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
return 60000
`)},
	}
	gateOpen = kit.MustLoad(gateFS, &gateLayout, "gate_open")
	gateRead = kit.MustLoad(gateFS, &gateLayout, "gate_read")
)

// exampleClient is a Client on a miniredis of its own, closed by the
// returned function.
func exampleClient() (*kit.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	client, err := kit.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	return client, func() {
		client.Close(context.Background())
		rdb.Close()
		m.Close()
	}
}

// Wait waits without a grant: until a read of the primitive says it is
// ready. Do opens the gate once however many of its tries reach Redis (a
// call id, the same for every try); its message wakes the waiter at once.
func ExampleSite_Wait() {
	client, done := exampleClient()
	defer done()
	ctx := context.Background()
	gate, err := kit.NewSite(client, &gateLayout, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		opened <- gate.Wait(ctx, "Wait", func(ctx context.Context) error {
			v, err := gate.Eval(ctx, "read", gateRead)
			if err != nil {
				return err
			}
			if ms, _ := v.(int64); ms >= 0 {
				return &latchkit.HeldError{WaitHint: time.Duration(ms) * time.Millisecond}
			}
			return nil
		})
	}()
	time.Sleep(50 * time.Millisecond) // the waiter reads the gate shut
	v, err := gate.Do(ctx, "open", gateOpen)
	fmt.Println("opened by this call:", v, err)
	fmt.Println("the waiter:", <-opened)
	// Output:
	// opened by this call: 1 <nil>
	// the waiter: <nil>
}

// Eval runs a script of the primitive once: here a read.
func ExampleSite_Eval() {
	client, done := exampleClient()
	defer done()
	ctx := context.Background()
	gate, err := kit.NewSite(client, &gateLayout, "deploy")
	if err != nil {
		log.Fatal(err)
	}
	v, err := gate.Eval(ctx, "read", gateRead)
	fmt.Println("shut for at most", v, "ms:", err)
	if _, err := gate.Do(ctx, "open", gateOpen); err != nil {
		log.Fatal(err)
	}
	v, err = gate.Eval(ctx, "read", gateRead)
	fmt.Println("open:", v, err)
	// Output:
	// shut for at most 60000 ms: <nil>
	// open: -1 <nil>
}

// A Holder makes a grant a lease: fenced, renewed while held, released by
// Release (and by the Client's Close). This lock keeps "token fence" in
// one key; its fence comes from next_fence, the server's clock in µs.
func ExampleHolder() {
	layout := kit.Layout{Kind: "simple_lock", Channel: ":sl:rel", Keys: []kit.Key{
		{Name: "lock", Suffix: ":sl", Type: "string"},
		{Name: "gone", Suffix: ":sl:gone", Type: "zset"},
	}}
	mine := "local v = redis.call('GET', KEYS[1])\nlocal mine = v and string.match(v, '^(%S+)') == ARGV[1]\n"
	scripts := fstest.MapFS{
		"lua/sl_lock.lua": {Data: []byte(`--@uses clock next_fence
--@keys lock gone
local v = redis.call('GET', KEYS[1])
local g = redis.call('ZMSCORE', KEYS[2], ARGV[1], '#')
local _, us = clock()
if v then
  local holder, f = string.match(v, '^(%S+) (%d+)$')
  if holder == ARGV[1] then return {1, tonumber(f)} end
  return {0, redis.call('PTTL', KEYS[1]), false}
end
if g[1] then return {0, 0, false} end
local f = next_fence(us, g[2])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'PX', ARGV[2])
return {1, f}
`)},
		"lua/sl_release.lua": {Data: []byte("--@uses now_ms remember\n--@keys lock gone\nredis.call('ZCARD', KEYS[2])\n" + mine +
			"if ARGV[3] == '1' then remember(KEYS[2], ARGV[1], now_ms()) end\n" +
			"if not mine then return 0 end\nredis.call('DEL', KEYS[1])\nredis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE')\nreturn 1\n")},
		"lua/sl_extend.lua": {Data: []byte("--@keys lock\n" + mine + "if not mine then return 0 end\nredis.call('PEXPIRE', KEYS[1], ARGV[2])\nreturn 1\n")},
		"lua/sl_ttl.lua":    {Data: []byte("--@keys lock\n" + mine + "if not mine then return -3 end\nreturn redis.call('PTTL', KEYS[1])\n")},
	}
	lock := kit.MustLoad(scripts, &layout, "sl_lock")
	holder := &kit.Holder{
		Extend:  kit.MustLoad(scripts, &layout, "sl_extend"),
		Release: kit.MustLoad(scripts, &layout, "sl_release"),
		TTL:     kit.MustLoad(scripts, &layout, "sl_ttl"),
	}

	client, done := exampleClient()
	defer done()
	ctx := context.Background()
	site, err := kit.NewSite(client, &layout, "report")
	if err != nil {
		log.Fatal(err)
	}
	first, err := site.Acquire(ctx, kit.Acquisition{Op: "Lock", Attempt: lock, Holder: holder})
	if err != nil {
		log.Fatal(err)
	}
	_, err = site.Acquire(ctx, kit.Acquisition{Op: "Lock", Try: true, Attempt: lock, Holder: holder})
	fmt.Println("a second TryLock:", err != nil)
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := site.Acquire(ctx, kit.Acquisition{Op: "Lock", Try: true, Attempt: lock, Holder: holder})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the release: granted, fence above the first:", second.Fence() > first.Fence())
	fmt.Println(second.Release(ctx))
	// Output:
	// a second TryLock: true
	// after the release: granted, fence above the first: true
	// <nil>
}
