package primitives_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rd "github.com/redis/rueidis"

	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// BenchmarkMutexFreshNames is S2 of the benchmarks (cd bench && go run
// .) in-process, for a profile of the client's side: 64 goroutines on one
// rueidis client, each op a NewMutex of a fresh name, a TryLock and a
// Release, against a redis-server on loopback. The figures are the
// bench's; this is for
//
//	go test -run '^$' -bench MutexFreshNames -cpuprofile cpu.out ./primitives
func BenchmarkMutexFreshNames(b *testing.B) {
	redistest.Require(b)
	srv := redistest.Start(b)
	c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{srv.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cl, _ := primitives.NewClient(lrueidis.New(c))
	defer cl.Close(context.Background())
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32) // 32 goroutines a core: 64 on 2 cores, as S2
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu, _ := primitives.NewMutex(cl, "k"+strconv.FormatInt(n.Add(1), 10))
			l, err := mu.TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			l.Release(ctx)
		}
	})
}
