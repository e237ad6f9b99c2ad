package kit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/kit/kittest"
	"github.com/latchkit/latchkit/primitives"
)

// A permit-expirable semaphore (docs/kit.md, "Writing one"): at most limit
// permits of a name at once, each ending at its own expiry (the TTL), with
// no lease, no watchdog and no release. Its scripts are the shape of
// package ratelimit's with the log scored by each permit's expiry.
var (
	permitLayout = kit.Layout{Kind: "expiring_semaphore", Keys: []kit.Key{
		{Name: "permits", Suffix: ":xs", Type: "zset"}, // token -> its expiry (server ms)
		{Name: "gone", Suffix: ":xs:gone", Type: "zset"},
	}}
	permitScripts = fstest.MapFS{
		"lua/xs_take.lua": {Data: []byte(`--@uses clock keep invalid
--@keys permits gone
-- ARGV: the attempt header (1 token, 2 ttl ms, 3 waiter timeout ms,
-- 4 annotation, 5 retention ms), 6 the limit.
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local given = redis.call('ZSCORE', KEYS[2], ARGV[1])
local limit = tonumber(ARGV[6])
if not limit or limit < 1 then return invalid('limit is not a number of at least 1') end
local now = clock()
if mine and tonumber(mine) > now then return {1, 1} end -- an earlier try got through
if given then return {0, 0, false} end -- a late copy of a given-up attempt
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
  keep(KEYS[1], tonumber(ARGV[2]))
  return {1, 1}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(tonumber(first[2]) - now, 1), false}
`)},
		"lua/xs_giveback.lua": {Data: []byte(`--@uses now_ms remember
--@keys permits gone
-- ARGV: 1 token, 2 the release channel, 3 mode ("1": a give-back).
redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZSCORE', KEYS[2], ARGV[1])
local freed = redis.call('ZREM', KEYS[1], ARGV[1])
remember(KEYS[2], ARGV[1], now_ms())
if freed == 1 then redis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE') end
return freed
`)},
	}
	permitTake     = kit.MustLoad(permitScripts, &permitLayout, "xs_take")
	permitGiveBack = kit.MustLoad(permitScripts, &permitLayout, "xs_giveback")
)

// permits is the expiring semaphore of one name.
type permits struct {
	site  *kit.Site
	limit []string
}

func newPermits(cl *kit.Client, name string, limit int, opts ...kit.Option) (*permits, error) {
	if limit < 1 {
		return nil, &latchkit.OpError{Op: "new", Kind: permitLayout.Kind, Name: name,
			Err: fmt.Errorf("%w: limit %d is below 1", latchkit.ErrInvalid, limit)}
	}
	s, err := kit.NewSite(cl, &permitLayout, name, opts...)
	if err != nil {
		return nil, err
	}
	return &permits{site: s, limit: []string{strconv.Itoa(limit)}}, nil
}

// take waits for a permit (one attempt with try); it ends by itself.
func (p *permits) take(ctx context.Context, try bool) error {
	_, err := p.site.Acquire(ctx, kit.Acquisition{Op: "Take", Try: try, Attempt: permitTake, Args: p.limit, GiveBack: permitGiveBack})
	return err
}

// Permits that end at their own expiry: two permits of a minute; a third
// waits for the first to expire. The test moves miniredis's clock.
func Example_expiringPermits() {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m.SetTime(now) // what TIME returns
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	client, err := kit.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	exports, err := newPermits(client, "exports", 2, primitives.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	try := func() {
		err := exports.take(ctx, true)
		var held *latchkit.HeldError
		if errors.As(err, &held) {
			fmt.Printf("no permit: the first expires in %v\n", held.WaitHint)
			return
		}
		fmt.Println("permit:", err)
	}
	try()
	try()
	try()
	m.SetTime(now.Add(time.Minute))
	m.FastForward(time.Minute) // what expires keys
	try()
	// Output:
	// permit: <nil>
	// permit: <nil>
	// no permit: the first expires in 1m0s
	// permit: <nil>
}

// The expiring semaphore keeps the rules of a kit primitive.
func TestExpiringPermitsKeepTheKitRules(t *testing.T) {
	kittest.Run(t, kittest.Subject{Layout: &permitLayout, Limit: 2,
		Acquire: func(ctx context.Context, cl *kit.Client, name string, try bool, opts ...kit.Option) (latchkit.Lease, error) {
			p, err := newPermits(cl, name, 2, append([]kit.Option{primitives.WithTTL(time.Minute)}, opts...)...)
			if err != nil {
				return nil, err
			}
			return nil, p.take(ctx, try)
		}})
}
