package contracttest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// The benchmarks compare an uncontended TryLock+Release with the physical
// floor on the same driver and server: SET NX PX, then an EVALSHA
// compare-and-delete — the two round trips any safe lock must cost.
//
//	go test -run '^$' -bench Mutex -count 5 ./contracttest/ | tee new.txt
//	benchstat new.txt
//
// They run against a real redis-server on loopback (started by the
// benchmark), because miniredis's speed says nothing about Redis's.

// casDel is the floor's release: compare-and-delete.
var casDel = backend.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func benchGoRedis(b *testing.B) (*redis.Client, backend.Backend) {
	s := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, PoolSize: 128})
	b.Cleanup(func() { c.Close() })
	return c, goredis.New(c)
}

// keyNames makes distinct key names, so that the benchmark measures the
// uncontended path.
var keySeq atomic.Int64

func nextName() string { return fmt.Sprintf("k%d", keySeq.Add(1)) }

// runG runs op b.N times in all, spread over exactly g goroutines.
func runG(b *testing.B, g int, op func()) {
	b.ReportAllocs()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				op()
			}
		}()
	}
	wg.Wait()
}

func benchMutex(b *testing.B, be backend.Backend, g int) {
	ctx := context.Background()
	cl := clienttest.For(b, be)
	runG(b, g, func() {
		m, err := primitives.NewMutex(cl, nextName())
		if err != nil {
			b.Fatal(err)
		}
		l, err := m.TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

func benchGoRedisFloor(b *testing.B, c *redis.Client, be backend.Backend, g int) {
	ctx := context.Background()
	runG(b, g, func() {
		key := "latch:{" + nextName() + "}"
		tok := "0123456789abcdef0123456789abcdef"
		ok, err := c.SetNX(ctx, key, tok, 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if _, err := be.Eval(ctx, casDel, []string{key}, []string{tok}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkMutexGoRedis: from one goroutine, and from 64 on distinct keys.
func BenchmarkMutexGoRedis(b *testing.B) {
	c, be := benchGoRedis(b)
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("TryLockRelease/g=%d", g), func(b *testing.B) { benchMutex(b, be, g) })
		b.Run(fmt.Sprintf("Floor/g=%d", g), func(b *testing.B) { benchGoRedisFloor(b, c, be, g) })
	}
}

func benchRueidis(b *testing.B) (rd.Client, backend.Backend) {
	s := redistest.Start(b)
	c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{s.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c, lrueidis.New(c)
}

func benchRueidisFloor(b *testing.B, c rd.Client, be backend.Backend, g int) {
	ctx := context.Background()
	runG(b, g, func() {
		key := "latch:{" + nextName() + "}"
		tok := "0123456789abcdef0123456789abcdef"
		if err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().Px(10*time.Second).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		if _, err := be.Eval(ctx, casDel, []string{key}, []string{tok}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkMutexRueidis: as BenchmarkMutexGoRedis, through rueidis.
func BenchmarkMutexRueidis(b *testing.B) {
	c, be := benchRueidis(b)
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("TryLockRelease/g=%d", g), func(b *testing.B) { benchMutex(b, be, g) })
		b.Run(fmt.Sprintf("Floor/g=%d", g), func(b *testing.B) { benchRueidisFloor(b, c, be, g) })
	}
}

// BenchmarkRedlock: uncontended TryLock+Release over 5 redis-servers,
// against a Mutex on one of them.
func BenchmarkRedlock(b *testing.B) {
	var bs []backend.Backend
	for i := 0; i < 5; i++ {
		s := redistest.Start(b)
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, PoolSize: 128})
		b.Cleanup(func() { c.Close() })
		bs = append(bs, goredis.New(c))
	}
	ctx := context.Background()
	run := func(b *testing.B, g int, newLock func(name string) (primitives.Mutex, error)) {
		runG(b, g, func() {
			m, err := newLock(nextName())
			if err != nil {
				b.Fatal(err)
			}
			l, err := m.TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("Redlock5/g=%d", g), func(b *testing.B) {
			cs := clienttest.All(b, bs)
			run(b, g, func(n string) (primitives.Mutex, error) {
				// 64 goroutines x 5 instances on 2 cores: give each
				// instance more than the default 100ms.
				return primitives.NewRedlock(cs, n, primitives.WithAutoExtend(false), primitives.WithInstanceTimeout(time.Second))
			})
		})
		b.Run(fmt.Sprintf("Mutex1/g=%d", g), func(b *testing.B) {
			cl := clienttest.For(b, bs[0])
			run(b, g, func(n string) (primitives.Mutex, error) {
				return primitives.NewMutex(cl, n, primitives.WithAutoExtend(false))
			})
		})
	}
}

// BenchmarkHandOver: 4 clients (separate connections and subscriptions, as
// separate processes would have) take turns on one Mutex, each Lock,
// Release and Lock again at once; ns/op is the time per acquisition, that
// is, per hand-over from one client to the next (a release wakes only the
// waiter it hands the lock to).
func BenchmarkHandOver(b *testing.B) {
	s := redistest.Start(b)
	name := nextName()
	var ms []primitives.Mutex
	for range 4 {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		m, err := primitives.NewMutex(clienttest.For(b, goredis.New(c)), name)
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
	}
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for _, m := range ms {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
