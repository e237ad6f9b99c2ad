package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestWaiterAcrossHang is the focused form of a TestTimelyManyLeases
// flake (FairMutex [n1] on a Cluster whose node hung: the other client was
// never granted it once the node came back). On one redis-server, a holder
// holds each of Mutex, FairMutex and FairSemaphore(1) with TTLs of 0.6, 3
// and 6 s while another client waits (Lock, from before the hang); the
// server hangs (SIGSTOP) past every TTL and past the waiter timeout, then
// resumes. Checked, with every driver:
//   - a waiting Lock never returns while its context is live unless
//     granted: a hung server is ridden out (README: "A waiting Lock rides
//     out a Redis that cannot be reached");
//   - every waiter is granted within hangGrantBound of the resume (the
//     holders' leases were lost long before): nothing left behind by the
//     hang (an abandoned acquisition's late attempt) holds the lock for a
//     TTL.
func TestWaiterAcrossHang(t *testing.T) {
	redistest.Require(t)
	const (
		waiterTimeout  = 3 * time.Second // the default
		hangGrantBound = 2 * time.Second
	)
	ttls := []time.Duration{600 * time.Millisecond, 3 * time.Second, 6 * time.Second}
	hang := ttls[len(ttls)-1] + waiterTimeout + time.Second
	for _, d := range lane.Subset(drivers, 3, 1) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			// Two processes: the holders' and the waiters', each a Client
			// of its own.
			holderC, waiterC := clienttest.For(t, d.new(t, srv.Addr)), clienttest.For(t, d.new(t, srv.Addr))
			ctx, cancel := context.WithTimeout(context.Background(), hang+time.Minute)
			defer cancel()

			type waiter struct {
				what  string
				lock  acquireFunc
				mu    sync.Mutex
				calls []string  // each Lock's outcome
				early []string  // errors returned with the context live
				grant time.Time // when first granted
			}
			var ws []*waiter
			var leases []latchkit.Lease
			for _, k := range []kind{kMutex, kFairMutex, kFairSem} {
				for _, ttl := range ttls {
					name := fmt.Sprintf("%s-%v", k.name, ttl)
					opts := []primitives.Option{primitives.WithPrefix("hw:"), primitives.WithTTL(ttl), primitives.WithWaiterTimeout(waiterTimeout)}
					hl, _, err := k.open([]*primitives.Client{holderC}, []string{name}, false, opts...)
					if err != nil {
						t.Fatal(err)
					}
					wl, _, err := k.open([]*primitives.Client{waiterC}, []string{name}, false, opts...)
					if err != nil {
						t.Fatal(err)
					}
					l, err := hl(ctx)
					if err != nil {
						t.Fatal(err)
					}
					leases = append(leases, l)
					ws = append(ws, &waiter{what: fmt.Sprintf("%s (TTL %v)", k.name, ttl), lock: wl})
				}
			}
			defer releaseAll(leases...)

			// The waiters queue while the server is up, then it hangs.
			var resumed time.Time
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Go(func() {
					for wctx.Err() == nil {
						l, err := w.lock(wctx)
						now := time.Now()
						w.mu.Lock()
						if err == nil {
							w.calls = append(w.calls, now.Format("15:04:05.000")+" granted")
							w.grant = now
						} else {
							w.calls = append(w.calls, now.Format("15:04:05.000")+" "+err.Error())
							if wctx.Err() == nil && !errors.Is(err, latchkit.ErrNotAcquired) {
								w.early = append(w.early, err.Error())
							}
						}
						w.mu.Unlock()
						if err == nil {
							rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
							l.Release(rctx)
							rcancel()
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			srv.Pause()
			time.Sleep(hang)
			srv.Resume()
			resumed = time.Now()
			time.Sleep(hangGrantBound)
			wcancel()
			wg.Wait()
			for _, w := range ws {
				w.mu.Lock()
				switch {
				case w.grant.IsZero():
					t.Errorf("%s: the waiter was not granted within %v of the resume; its Locks: %v", w.what, hangGrantBound, w.calls)
				case len(w.early) > 0:
					t.Errorf("%s: a waiting Lock returned while its context was live: %v (granted %v after the resume)", w.what, w.early, w.grant.Sub(resumed).Round(time.Millisecond))
				default:
					t.Logf("%s: granted %v after the resume", w.what, w.grant.Sub(resumed).Round(time.Millisecond))
				}
				w.mu.Unlock()
			}
		})
	}
}
