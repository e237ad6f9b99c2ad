package faults_test

import (
	"context"
	"github.com/cenkalti/backoff/v4"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// resendingGoRedis is a go-redis client that times out reading after
// 100 ms and, as go-redis does by default (MaxRetries 3), sends the
// command again on a new connection: behind 150 ms of latency every copy
// reaches the server and runs there, while the caller sees a timeout.
var resendingGoRedis = driver{"go-redis (100 ms read timeout, resends)", func(t *testing.T, addr string) backend.Backend {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 100 * time.Millisecond,
		DialTimeout: 200 * time.Millisecond, DialerRetries: 1, PoolSize: 8})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c, goredis.WithHealthCheck(300*time.Millisecond))
}}

// latchFault is what happens to one count-down client's CountDown call.
type latchFault struct {
	name   string
	inject func(px *faultproxy.Proxy) (heal func())
}

var latchFaults = []latchFault{
	{"none", func(*faultproxy.Proxy) func() { return func() {} }},
	{"reply dropped", func(px *faultproxy.Proxy) func() {
		px.DropNextReplies(1)
		return func() { px.DropNextReplies(0) }
	}},
	{"run twice", func(px *faultproxy.Proxy) func() {
		px.ResendNext(faultproxy.Command("EVALSHA", "EVAL"), 50*time.Millisecond)
		return func() {}
	}},
	{"reset mid-call", func(px *faultproxy.Proxy) func() {
		px.SetLatency(20 * time.Millisecond)
		t := time.AfterFunc(10*time.Millisecond, px.ResetAll)
		return func() { t.Stop(); px.SetLatency(0) }
	}},
	{"150 ms latency for 500 ms", func(px *faultproxy.Proxy) func() {
		px.SetLatency(150 * time.Millisecond)
		t := time.AfterFunc(500*time.Millisecond, func() { px.SetLatency(0) })
		return func() { t.Stop(); px.SetLatency(0) }
	}},
}

// TestLatchFaults counts a latch down through faulty connections, every
// driver: per round, a setter sets the count to 5 (its reply dropped every
// other round), 4 clients each count it down once, their calls spread
// over 90 ms, each behind its own proxy with a fault of its own (none, the
// reply dropped with the connection reset after the server ran the call,
// the call run twice by the proxy, a reset while the call is in flight,
// 150 ms of latency, which makes the resending go-redis client time out
// and send the call again, several times); once they all returned, the
// count must be exactly 1, and a fifth count-down, direct, opens the
// latch. Meanwhile two waiters wait, one directly, one behind a proxy
// whose connections are reset mid-wait (its subscription dropped), and a
// checker reads the count in a loop. The latch is set again for the next
// round (5 rounds).
//
// A violation is: a TrySetCount that fails or reports false (the latch was
// open); a CountDown that fails (it rides the faults out with the same id);
// a count read below the number of count-downs not yet started (a call
// counted twice) or above 5; a count other than 1 after the 4 faulty
// count-downs returned (one counted twice, or not at all); a waiter that
// returns before the fifth count-down started, fails, or is not back
// within 3 s of it; a count other than 0 at the end of a round.
func TestLatchFaults(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t)       // servers of its own; it checks outcomes, not timing
	const downs, rounds = 4, 5 // faulty count-downs a round; a fifth opens the latch
	// The fast lane: the go-redis client that resends (index 4).
	for _, d := range lane.Subset(append(append([]driver{}, drivers...), resendingGoRedis), 4, 1) {
		t.Run(d.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			opts := []primitives.Option{primitives.WithPrefix("lf:"), primitives.WithRetry(func() backoff.BackOff {
				return backoff.NewExponentialBackOff(backoff.WithInitialInterval(5*time.Millisecond), backoff.WithMaxInterval(50*time.Millisecond), backoff.WithMaxElapsedTime(0))
			})}
			// open makes a client of the latch: behind a proxy of its own
			// (proxied), or connected to the server directly.
			open := func(proxied bool) (primitives.Latch, *faultproxy.Proxy) {
				var px *faultproxy.Proxy
				addr := srv.Addr
				if proxied {
					px = faultproxy.Start(t, srv.Addr)
					addr = px.Addr
				}
				l, err := primitives.NewLatch(clienttest.For(t, d.new(t, addr)), "shards", clienttest.Fitting[primitives.LatchOption](opts)...)
				if err != nil {
					t.Fatal(err)
				}
				return l, px
			}
			setter, setterPx := open(true)
			downers := make([]primitives.Latch, downs)
			downPx := make([]*faultproxy.Proxy, downs)
			for i := range downers {
				downers[i], downPx[i] = open(true)
			}
			waitProxied, waiterPx := open(true)
			waitDirect, _ := open(false)
			checker, _ := open(false)

			violations, ops := 0, 0
			var vmu sync.Mutex
			fail := func(format string, a ...any) {
				vmu.Lock()
				violations++
				vmu.Unlock()
				t.Errorf(format, a...)
			}
			var injected []string
			for r := 0; r < rounds; r++ {
				// The setter: every other round its reply is lost.
				if r%2 == 1 {
					setterPx.DropNextReplies(1)
				}
				ok, err := setter.TrySetCount(ctx, downs+1)
				setterPx.DropNextReplies(0)
				ops++
				if err != nil || !ok {
					fail("round %d: TrySetCount(%d) on the open latch: %v, %v", r, downs+1, ok, err)
					continue
				}

				var started atomic.Int32
				type back struct {
					started int32
					at      time.Time
					err     error
				}
				waiters := []primitives.Latch{waitDirect, waitProxied}
				woken := make(chan back, len(waiters))
				for _, w := range waiters {
					go func() {
						wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
						defer cancel()
						err := w.Wait(wctx)
						woken <- back{started.Load(), time.Now(), err}
					}()
				}
				time.Sleep(100 * time.Millisecond) // the waiters subscribe
				if r%2 == 0 {
					waiterPx.ResetAll() // the proxied waiter's subscription drops
				}

				// The checker: the count never falls below the count-downs
				// not yet started.
				stop := make(chan struct{})
				checked := make(chan int)
				go func() {
					reads, bad := 0, 0
					defer func() { checked <- reads }()
					for {
						select {
						case <-stop:
							if bad > 0 {
								t.Logf("round %d: %d of %d reads of the count were wrong", r, bad, reads)
							}
							return
						default:
						}
						n, err := checker.Count(ctx)
						s := started.Load()
						reads++
						if err == nil && (n < int64(downs+1-int(s)) || n > downs+1) {
							if bad++; bad == 1 { // one violation a round
								fail("round %d: count %d with %d of %d count-downs started", r, n, s, downs+1)
							}
						}
						time.Sleep(2 * time.Millisecond)
					}
				}()

				var wg sync.WaitGroup
				for i := range downers {
					f := latchFaults[(r+i)%len(latchFaults)]
					injected = append(injected, f.name)
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(time.Duration(i) * 30 * time.Millisecond)
						heal := f.inject(downPx[i])
						defer heal()
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						started.Add(1)
						start := time.Now()
						if err := downers[i].CountDown(cctx); err != nil {
							fail("round %d: CountDown %d (%s): %v after %v", r, i, f.name, err, time.Since(start))
						}
					}()
				}
				wg.Wait()
				ops += downs
				if n, err := checker.Count(ctx); err != nil || n != 1 {
					fail("round %d: count %d (%v) after %d of %d count-downs, want 1", r, n, err, downs, downs+1)
				}
				// The fifth count-down opens the latch.
				started.Add(1)
				if err := checker.CountDown(ctx); err != nil {
					fail("round %d: the last CountDown: %v", r, err)
				}
				last := time.Now()
				ops += 2
				for range waiters {
					select {
					case b := <-woken:
						ops++
						if b.err != nil {
							fail("round %d: Wait: %v", r, b.err)
						} else if b.started < downs+1 {
							fail("round %d: a waiter returned with %d of %d count-downs started", r, b.started, downs+1)
						} else if late := b.at.Sub(last); late > 3*time.Second {
							fail("round %d: a waiter returned %v after the last CountDown returned", r, late)
						}
					case <-time.After(5 * time.Second):
						fail("round %d: a waiter still waiting 5 s after the last CountDown returned", r)
					}
				}
				close(stop)
				ops += <-checked
				if n, err := checker.Count(ctx); err != nil || n != 0 {
					fail("round %d: count %d (%v) after all %d count-downs, want 0", r, n, err, downs+1)
				}
			}
			table.mu.Lock()
			table.rows = append(table.rows, row{"latch count-downs", d.name, "Latch", ops,
				"per CountDown one of: " + strings.Join(uniq(injected), ", ") + "; the setter's reply dropped every other round; the waiter's connections reset", violations})
			table.mu.Unlock()
			t.Logf("%d rounds, %d operations, %d violations", rounds, ops, violations)
		})
	}
}

// uniq returns s without repeats, in first-seen order.
func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
