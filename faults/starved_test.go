package faults_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/cpuhog"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// busyGoroutines keeps n goroutines of the test process spinning until t
// ends.
func busyGoroutines(t *testing.T, n int) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := 0
			for !stop.Load() {
				for i := range 1000 {
					x += i
				}
			}
			_ = x
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
}

// TestTimelyStarved runs every primitive, through every driver, in a
// process starved of CPU: two busy processes (internal/testrig/cpuhog) on this
// 2-core machine, and one busy goroutine in the process (one fewer than
// GOMAXPROCS: the scheduler is late, not stopped). The holder's client is
// partitioned (its connections black-holed) right after a grant (TTL 1 s),
// for two TTLs. Checked, with starvedSlack for the late scheduler:
//   - the holder's Context ends by the grant's start + TTL - drift + starvedSlack
//     (the partition outlasts the TTL: the loss is forced);
//   - another client waiting with Lock is granted (it must be, once the
//     lease expires on the server) only after the holder's Context ended,
//     give or take starvedSlack;
//   - a lease of the same primitive on a client that is not partitioned
//     is still live after two TTLs and held on the server;
//   - Extend, Release, Lock and TryLock by the partitioned client, each
//     with a 200 ms deadline, return within it plus starvedSlack.
func TestTimelyStarved(t *testing.T) {
	redistest.Require(t)
	const (
		sttl   = time.Second
		callDL = 200 * time.Millisecond
	)
	cpuhog.Start(t, 2)
	busyGoroutines(t, max(runtime.GOMAXPROCS(0)-1, 1))
	faults := "CPU starved (2 busy processes, 1 busy goroutine); the holder partitioned right after a grant (TTL 1 s) for 2 TTLs; Extend, Release, Lock, TryLock with 200 ms deadlines; a contender waits"
	// The fast lane: one driver and three kinds (a lock, a fair semaphore,
	// a Redlock), to keep the busy processes' time beside other packages
	// short.
	for _, d := range lane.Subset(drivers, 3, 1) {
		for _, k := range lane.Pick([]kind{kMutex, kFairSem, kRedlock}, kinds) {
			t.Run(d.name+"/"+k.name, func(t *testing.T) {
				v := &verdict{t: t}
				var pxs []*faultproxy.Proxy
				var holderB, otherB, byB []backend.Backend
				for range k.instances {
					s := redistest.Start(t)
					px := faultproxy.Start(t, s.Addr)
					pxs = append(pxs, px)
					holderB = append(holderB, d.new(t, px.Addr))
					otherB = append(otherB, d.new(t, s.Addr))
					byB = append(byB, d.new(t, s.Addr))
				}
				open := func(bs []backend.Backend, base string, extra ...primitives.Option) (acquireFunc, acquireFunc) {
					lock, try, err := k.open(clienttest.All(t, bs), namesFor(k, base), false, append([]primitives.Option{primitives.WithTTL(sttl), primitives.WithPrefix("s:")}, extra...)...)
					if err != nil {
						t.Fatal(err)
					}
					return lock, try
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				take := func(bs []backend.Backend, base string) (latchkit.Lease, time.Time) {
					lock, _ := open(bs, base)
					called := time.Now()
					l, err := lock(ctx)
					if err != nil {
						t.Fatalf("%s: %v", base, err)
					}
					return l, called
				}
				bl, bcalled := take(byB, "bystander")
				wB := watch(k, namesFor(k, "bystander"), sttl, bcalled, bl)
				defer wB.stopWait()
				ext, _ := take(holderB, "extend")
				rel, _ := take(holderB, "release")
				lockK, _ := open(holderB, "lock")
				_, tryY := open(holderB, "try")
				hl, called := take(holderB, "held")
				w := watch(k, namesFor(k, "held"), sttl, called, hl)
				defer w.stopWait()
				for _, p := range pxs {
					p.Blackhole(true)
				}
				faultAt := time.Now()
				healed := false
				heal := func() {
					if !healed {
						healed = true
						for _, p := range pxs {
							p.Blackhole(false)
						}
					}
				}
				defer heal()
				if faultAt.After(w.called.Add(sttl / 4)) {
					t.Fatalf("the partition began %v after the grant was asked for: a renewal may have run first", faultAt.Sub(w.called))
				}

				var c contender
				cLock, _ := open(otherB, "held", primitives.WithMiddleware(attemptCounter(&c.attempts)))
				cctx, ccancel := context.WithDeadline(ctx, faultAt.Add(2*sttl))
				defer ccancel()
				var wg sync.WaitGroup
				wg.Go(func() { c.run(cctx, cLock) })

				var calls [4]time.Duration
				var ats [4]time.Time
				var errs [4]error
				for i, f := range []func(context.Context) error{
					func(ctx context.Context) error { return ext.Extend(ctx, sttl) },
					rel.Release,
					func(ctx context.Context) error {
						l, err := lockK(ctx)
						if err == nil {
							l.Release(ctx)
						}
						return err
					},
					func(ctx context.Context) error {
						l, err := tryY(ctx)
						if err == nil {
							l.Release(ctx)
						}
						return err
					},
				} {
					wg.Go(func() { calls[i], ats[i], errs[i] = timedCall(callDL, f) })
				}
				end, ok := w.waitEnded(faultAt.Add(2 * sttl))
				dl := w.deadline(faultAt)
				if !ok {
					v.late("the partitioned holder's loss was never told; waited", time.Now(), time.Since(dl), starvedSlack)
				} else {
					v.late("the partitioned holder's loss was told", end, end.Sub(dl), starvedSlack)
					t.Logf("loss told %v after the holder's deadline", end.Sub(dl).Round(time.Millisecond))
				}
				wg.Wait()
				for i, what := range []string{"Extend", "Release", "Lock", "TryLock"} {
					t.Logf("%s during the partition: %v after its deadline: %v", what, calls[i].Round(time.Millisecond), errs[i])
					v.late(what+" (200 ms deadline) during the partition returned", ats[i], calls[i], callSlack(what, starvedSlack))
				}
				checkOverlap(v, w, &c, starvedSlack)
				if _, ok := c.firstGrant(); !ok {
					t.Errorf("the other client (%d attempts) was never granted it: %v", c.attempts.Load(), c.errs)
				}
				v.late("the other client's Lock returned", c.lateAt, c.lateCall, callSlack("Lock", starvedSlack))

				// The bystander, renewed all along.
				sleepUntil(wB.granted.Add(2 * sttl))
				if bend, ended := wB.ended(); ended {
					v.fail("the lease on a client that was not partitioned was told lost %v after its grant", bend.Sub(wB.granted).Round(time.Millisecond))
				} else {
					tctx, tcancel := context.WithTimeout(ctx, time.Second)
					if _, err := wB.l.TTL(tctx); err != nil {
						v.fail("the bystander's Context is live but the server says: %v", err)
					}
					tcancel()
				}
				heal()
				v.report("CPU-starved client, partitioned", d.name, k.name, 6+int(c.attempts.Load()), faults)
				releaseAll(wB.l, ext, w.l)
			})
		}
	}
}
