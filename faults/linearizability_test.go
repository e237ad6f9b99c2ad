package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// The sequential model of a semaphore of limit permits (a mutex: 1): the
// state is the set of clients holding, as a bit mask.
type semInput struct {
	client  int
	acquire bool // else release
}

// semOutput is an operation's outcome: for an acquire, granted or not
// (the primitive was full); for a release, whether the client held.
type semOutput struct{ ok bool }

func semModel(limit int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return uint64(0) },
		Step: func(state, input, output any) (bool, any) {
			held, in, out := state.(uint64), input.(semInput), output.(semOutput)
			me := uint64(1) << in.client
			switch {
			case in.acquire && out.ok:
				return held&me == 0 && bits.OnesCount64(held) < limit, held | me
			case in.acquire:
				return bits.OnesCount64(held) >= limit, held
			case out.ok:
				return held&me != 0, held &^ me
			default:
				return held&me == 0, held
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(semInput), output.(semOutput)
			op := "release"
			if in.acquire {
				op = "acquire"
			}
			return fmt.Sprintf("%d %s -> %v", in.client, op, out.ok)
		},
	}
}

// tryLocker is one client's single-attempt acquisition.
type tryLocker func(ctx context.Context) (release func(context.Context) error, err error)

// record runs clients concurrently, each taking and giving back the
// primitive through its own tryLocker for d, and returns the history.
func record(t *testing.T, clients []tryLocker, d time.Duration) []porcupine.Operation {
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	add := func(c int, in semInput, call int64, out semOutput) {
		mu.Lock()
		ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: now()})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c, try := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for end := time.Now().Add(d); time.Now().Before(end); {
				call := now()
				release, err := try(ctx)
				switch {
				case errors.Is(err, latchkit.ErrNotAcquired):
					add(c, semInput{c, true}, call, semOutput{false})
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					continue
				case err != nil:
					t.Errorf("client %d: %v", c, err)
					return
				}
				add(c, semInput{c, true}, call, semOutput{true})
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				call = now()
				err = release(ctx)
				add(c, semInput{c, false}, call, semOutput{err == nil})
				if err != nil && !errors.Is(err, latchkit.ErrLeaseLost) {
					t.Errorf("client %d release: %v", c, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return ops
}

// TestLinearizable records concurrent histories of acquisitions and
// releases from 5 clients (each with its own connections) on a real
// redis-server, for each driver, and checks them with porcupine against the
// sequential model of a semaphore (a mutex: limit 1). Two clients make
// single attempts (TryLock/TryAcquire); three wait (Lock/Acquire, given up
// after 20 ms), so hand-overs on release are in the history too.
func TestLinearizable(t *testing.T) {
	redistest.Require(t)
	for _, d := range drivers {
		for _, p := range []prim{prims[0], prims[1], prims[3], prims[4]} { // Mutex, FairMutex, Semaphore(2), FairSemaphore(2)
			t.Run(d.name+"/"+p.name, func(t *testing.T) {
				srv := redistest.Start(t)
				var clients []tryLocker
				for c := 0; c < 5; c++ {
					lock, try, _, err := p.open(d.new(t, srv.Addr), c, primitives.WithTTL(30*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					if c >= 2 {
						// Waiting Locks (given up after 20 ms): a release
						// hands the primitive over to them, inside the
						// release's and the Lock's intervals.
						try = func(ctx context.Context) (latchkit.Lease, error) {
							ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
							defer cancel()
							l, err := lock(ctx)
							if errors.Is(err, context.DeadlineExceeded) {
								err = fmt.Errorf("%w: %w", latchkit.ErrNotAcquired, err)
							}
							return l, err
						}
					}
					clients = append(clients, func(ctx context.Context) (func(context.Context) error, error) {
						l, err := try(ctx)
						if err != nil {
							return nil, err
						}
						return l.Release, nil
					})
				}
				ops := record(t, clients, 700*time.Millisecond)
				res := porcupine.CheckOperationsTimeout(semModel(p.limit), ops, 30*time.Second)
				violations := 0
				if res != porcupine.Ok {
					violations = 1
					t.Errorf("%d operations: porcupine says %s", len(ops), res)
				}
				waited := 0
				for _, op := range ops {
					if in := op.Input.(semInput); in.acquire && in.client >= 2 && op.Output.(semOutput).ok {
						waited++
					}
				}
				if waited == 0 {
					t.Error("no waiting Lock was granted: the history has no hand-over")
				}
				t.Logf("%d operations (%d grants to waiting Locks), linearizable: %s", len(ops), waited, res)
				table.mu.Lock()
				table.rows = append(table.rows, row{"linearizability", d.name, p.name, len(ops), "none: 5 clients, concurrent TryLock, waiting Lock (hand-overs) and Release checked by porcupine", violations})
				table.mu.Unlock()
			})
		}
	}
}

// brokenMutex is a deliberately wrong lock: it checks, then sets (GET, a
// pause, SET; not atomic), and releases without checking the owner.
type brokenMutex struct {
	c   *redis.Client
	key string
}

func (m brokenMutex) tryLock(ctx context.Context) (func(context.Context) error, error) {
	if err := m.c.Get(ctx, m.key).Err(); err == nil {
		return nil, latchkit.ErrNotAcquired
	} else if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	time.Sleep(200 * time.Microsecond) // the window of the race
	if err := m.c.Set(ctx, m.key, "x", 30*time.Second).Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return m.c.Del(ctx, m.key).Err() }, nil
}

// TestLinearizabilityCatchesBrokenMutex shows the checker is not a rubber
// stamp: the same workload over a check-then-set lock produces a history
// porcupine rejects.
func TestLinearizabilityCatchesBrokenMutex(t *testing.T) {
	srv := redistest.Start(t)
	var clients []tryLocker
	for c := 0; c < 5; c++ {
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		clients = append(clients, brokenMutex{rc, "broken"}.tryLock)
	}
	for try := 1; ; try++ {
		ops := record(t, clients, 500*time.Millisecond)
		res := porcupine.CheckOperationsTimeout(semModel(1), ops, 30*time.Second)
		if res == porcupine.Illegal {
			t.Logf("run %d: %d operations, porcupine: %s (as it must)", try, len(ops), res)
			table.mu.Lock()
			table.rows = append(table.rows, row{"linearizability (broken lock)", "go-redis", "check-then-set mutex", len(ops), "none; the lock itself is wrong", 1})
			table.mu.Unlock()
			return
		}
		if try == 5 {
			t.Fatalf("5 runs of a broken lock and porcupine found nothing (last: %s)", res)
		}
	}
}
