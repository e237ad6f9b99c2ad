package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// memoryResult is what Redis holds before, right after n distinct names
// were each locked once and released, and once the retention and the
// markers' minute have passed.
type memoryResult struct {
	names             int
	retention, waited time.Duration
	took              time.Duration
	keys              [3]int64 // baseline, after, after the retention
	usedMemory        [3]int64 // bytes
	usedMemoryDataset [3]int64
}

// measureMemory locks and releases n distinct names on a fresh
// redis-server, as per-entity locking does (NewMutex per name, Lock,
// Release), with g goroutines and a short retention, and reads DBSIZE and
// used_memory before, after, and after everything a name leaves has
// expired.
func measureMemory(ctx context.Context, srv *server, n, g int, retention time.Duration, progress func(string, ...any)) (memoryResult, error) {
	r := memoryResult{names: n, retention: retention}
	read := func(i int) error {
		keys, err := srv.admin.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mem, err := srv.info(ctx, "memory")
		if err != nil {
			return err
		}
		r.keys[i] = keys
		r.usedMemory[i], _ = strconv.ParseInt(mem["used_memory"], 10, 64)
		r.usedMemoryDataset[i], _ = strconv.ParseInt(mem["used_memory_dataset"], 10, 64)
		return nil
	}
	if err := read(0); err != nil {
		return r, err
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: g})
	defer c.Close()
	cl, err := primitives.NewClient(goredis.New(c))
	if err != nil {
		return r, err
	}
	defer closeLatchkit([]*primitives.Client{cl}) // before c closes
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				err := func() error {
					m, err := primitives.NewMutex(cl, "entity:"+strconv.FormatInt(i, 10), primitives.WithRetention(retention))
					if err != nil {
						return err
					}
					l, err := m.Lock(ctx)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}()
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				if i%100000 == 0 && i > 0 {
					progress("memory: %d names", i)
				}
			}
		})
	}
	wg.Wait()
	r.took = time.Since(start)
	if firstErr != nil {
		return r, firstErr
	}
	if err := read(1); err != nil {
		return r, err
	}
	// Everything a name leaves expires: its fence counter after the
	// retention, a release marker after a minute.
	r.waited = max(retention, time.Minute) + 5*time.Second
	progress("memory: waiting %v for the keys to expire", r.waited)
	select {
	case <-time.After(r.waited):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	// Expired keys are reclaimed lazily and by Redis's active expiry
	// cycle; give it a moment to finish.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if err := read(2); err != nil {
			return r, err
		}
		if r.keys[2] <= r.keys[0] || time.Now().After(deadline) {
			break
		}
	}
	return r, nil
}

func (r memoryResult) write(w io.Writer) {
	fmt.Fprintf(w, "## M1: memory of %d distinct names\n\n", r.names)
	fmt.Fprintf(w, "Each name locked once and released (`NewMutex` + `Lock` + `Release`, `WithRetention(%v)`), in %v; then everything waited out (%v: the minute the finished tokens live, and the retention, which a Mutex no longer uses).\n\n", r.retention, r.took.Round(time.Second), r.waited)
	fmt.Fprintln(w, "| when | keys | used_memory | used_memory_dataset |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for i, when := range []string{"before", fmt.Sprintf("after %d names", r.names), "after the retention"} {
		fmt.Fprintf(w, "| %s | %d | %.1f MiB | %.1f MiB |\n", when, r.keys[i], float64(r.usedMemory[i])/(1<<20), float64(r.usedMemoryDataset[i])/(1<<20))
	}
	per := float64(r.usedMemory[1]-r.usedMemory[0]) / float64(r.names)
	fmt.Fprintf(w, "\nAfter the names: %.2f keys and %.0f bytes of used_memory a name (the keys a name keeps after its last lease: a Mutex's finished tokens, until they expire). After the retention: %d keys beyond the baseline.\n", float64(r.keys[1]-r.keys[0])/float64(r.names), per, r.keys[2]-r.keys[0])
}
