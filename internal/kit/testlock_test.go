package kit_test

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
	engine "github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/kit"
)

// The machinery's own tests (leases, the renewer) run on testLock, a plain
// fenced lock written on package kit: one key ("token fence", PX ttl),
// nothing remembered, no queue.
var (
	lockLayout = kit.Layout{Kind: "test_lock", Keys: []kit.Key{{Name: "lock", Suffix: ":t", Type: "string"}}}
	lockFS     = fstest.MapFS{
		"lua/t_acquire.lua": {Data: []byte(`--@uses clock
--@keys lock
local v = redis.call('GET', KEYS[1])
local _, us = clock()
if v then
  local tok, f = string.match(v, '^(%S+) (%d+)$')
  if tok == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return {1, tonumber(f)} end
  return {0, redis.call('PTTL', KEYS[1]), false}
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', us), 'PX', ARGV[2])
return {1, us}
`)},
		"lua/t_extend.lua": {Data: []byte(`--@keys lock
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%S+') == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1 end
return 0
`)},
		"lua/t_release.lua": {Data: []byte(`--@keys lock
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%S+') == ARGV[1] then redis.call('DEL', KEYS[1]); redis.pcall('PUBLISH', ARGV[2], '$WAKE_ONE'); return 1 end
return 0
`)},
		"lua/t_ttl.lua": {Data: []byte(`--@keys lock
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%S+') == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
return -3
`)},
	}
	lockAcquire = kit.MustLoad(lockFS, &lockLayout, "t_acquire")
	lockHolder  = kit.Holder{
		Extend:  kit.MustLoad(lockFS, &lockLayout, "t_extend"),
		Release: kit.MustLoad(lockFS, &lockLayout, "t_release"),
		TTL:     kit.MustLoad(lockFS, &lockLayout, "t_ttl"),
	}
	// lockExtend is the extend script as backends see it (kit.Script
	// hides it), for counting renewals.
	lockExtend = engine.LoadScript(lockFS, "t_extend")
)

// testLock is the lock named name on cl, with opts.
type testLock struct{ s *kit.Site }

func newTestLock(tb testing.TB, cl *kit.Client, name string, opts ...kit.Option) testLock {
	tb.Helper()
	s, err := kit.NewSite(cl, &lockLayout, name, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return testLock{s}
}

// TryLock makes one attempt.
func (l testLock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return l.s.Acquire(ctx, kit.Acquisition{Op: "Lock", Try: true, Attempt: lockAcquire, Holder: &lockHolder})
}

// lockKey is the key of the test lock named name under prefix.
func lockKey(prefix, name string) string { return keyspace.KeyBase(prefix, name) + ":t" }

// newClient is a Client on b, closed when the test ends.
func newClient(tb testing.TB, b backend.Backend) *kit.Client {
	tb.Helper()
	cl, err := kit.NewClient(b)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl.Close(ctx)
	})
	return cl
}

// newMini is a miniredis server and a go-redis backend of it.
func newMini(tb testing.TB) (*miniredis.Miniredis, backend.Backend) {
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return m, goredis.New(c)
}

// evalOnly hides every optional interface of a backend (Batcher among
// them): a third-party adapter's minimum.
type evalOnly struct{ backend.Backend }

// setting is an option of the machinery's own tests: its effect on a
// Config (package primitives' With functions are the library's).
type setting func(*engine.Config)

func (s setting) ApplyOption(c *engine.Config) {
	if c != nil {
		s(c)
	}
}

func ttl(d time.Duration) kit.Option { return setting(func(c *engine.Config) { c.TTL = d }) }
func prefixOf(p string) kit.Option   { return setting(func(c *engine.Config) { c.Prefix = p }) }
func autoExtend(on bool) kit.Option  { return setting(func(c *engine.Config) { c.AutoExtend = on }) }
