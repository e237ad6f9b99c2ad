package faults_test

import (
	"context"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// sleepUntil sleeps until at.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// TestTimelyRenewalBesideHungNode is issue 13's second case, on a real
// 3-master Redis Cluster: one process (one client) holds four Mutexes of
// TTL 6 s on node A, taken 0.6 s apart; node A hangs (SIGSTOP) at 1.9 s; at
// 3.4 s the same client is granted a Mutex L of TTL 1.5 s on node B, which
// stays healthy. The renewals stuck on A must not keep L from being
// renewed:
//   - L's Context stays live to the end (past 3 of its TTLs) and the server
//     still holds it then (lease.TTL);
//   - another client, polling L with TryLock from 3.5 s on, is refused (it
//     must have been refused at least once) and never granted while L's
//     Context is live;
//   - the four leases on A are told lost by their deadlines plus slack
//     (the hang outlasts them: the losses are forced);
//   - a TryLock on A during the hang returns within its 200 ms deadline
//     plus slack.
func TestTimelyRenewalBesideHungNode(t *testing.T) {
	redistest.Require(t, "redis-cli")
	const (
		longTTL  = 6 * time.Second
		shortTTL = 1500 * time.Millisecond
		callDL   = 200 * time.Millisecond
		prefix   = "h:"
	)
	faults := "Cluster node A hung (SIGSTOP) while 4 leases (TTL 6 s) renew on it; a lease (TTL 1.5 s) on healthy node B must go on renewing; another client polls it"
	// go-redis with its default options is left out: it ignores deadlines
	// (TestTimelyWritesPaused covers that), which would hide the renewer's
	// part here.
	for _, d := range lane.Subset(append(append([]clusterDriver{}, clusterDrivers...), defaultClusterDrivers[1:]...), 0, 1) {
		t.Run(d.name, func(t *testing.T) {
			v := &verdict{t: t}
			cl := redistest.StartCluster(t, 3)
			keepHealthyNodesServing(t, cl)
			m := newClusterMap(t, cl)
			const nodeA, nodeB = 0, 1
			onA := m.namesOn(t, prefix, "a", nodeA, 5)
			onB := m.namesOn(t, prefix, "b", nodeB, 1)
			// The holding process and the other one: a Client each.
			holder, other := clienttest.For(t, d.new(t, cl.Addrs)), clienttest.For(t, d.new(t, cl.Addrs))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lock := func(c *primitives.Client, name string, ttl time.Duration) (acquireFunc, acquireFunc) {
				mu, err := primitives.NewMutex(c, name, primitives.WithTTL(ttl), primitives.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				return mu.Lock, mu.TryLock
			}
			take := func(name string, ttl time.Duration) *watched {
				l, _ := lock(holder, name, ttl)
				lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
				defer lcancel()
				called := time.Now()
				lease, err := l(lctx)
				if err != nil {
					t.Fatalf("lock %s: %v", name, err)
				}
				return watch(kMutex, []string{name}, ttl, called, lease)
			}

			// The other client knows the cluster before the hang (a
			// go-redis ClusterClient loads the slots on its first command).
			_, warm := lock(other, onB[0]+"-warm", shortTTL)
			if l, err := warm(ctx); err != nil {
				t.Fatal(err)
			} else {
				l.Release(ctx)
			}

			t0 := time.Now()
			var onAWatched []*watched
			for i := range 4 {
				sleepUntil(t0.Add(time.Duration(i) * 600 * time.Millisecond))
				w := take(onA[i], longTTL)
				defer w.stopWait()
				onAWatched = append(onAWatched, w)
			}
			sleepUntil(t0.Add(1900 * time.Millisecond))
			cl.Nodes[nodeA].Pause()
			faultAt := time.Now()
			t.Cleanup(cl.Nodes[nodeA].Resume)

			// A single attempt on the hung node returns by its deadline
			// (on its own goroutine: the scenario's clock goes on).
			var bg sync.WaitGroup
			defer bg.Wait()
			bg.Go(func() {
				sleepUntil(t0.Add(2500 * time.Millisecond))
				_, tryA := lock(holder, onA[4], longTTL)
				late, at, err := timedCall(callDL, func(ctx context.Context) error {
					l, err := tryA(ctx)
					if err == nil {
						l.Release(ctx)
					}
					return err
				})
				t.Logf("TryLock on the hung node: %v after its deadline: %v", late.Round(time.Millisecond), err)
				v.late("TryLock on the hung node (200 ms deadline) returned", at, late, acquireSlack)
			})

			sleepUntil(t0.Add(3400 * time.Millisecond))
			wL := take(onB[0], shortTTL)
			defer wL.stopWait()

			// Check once every lease on A is past its deadline.
			var checkAt time.Time
			for _, w := range onAWatched {
				if dl := w.deadline(faultAt).Add(slack + 100*time.Millisecond); dl.After(checkAt) {
					checkAt = dl
				}
			}
			var c contender
			_, otherTry := lock(other, onB[0], shortTTL)
			pctx, pcancel := context.WithDeadline(ctx, checkAt)
			defer pcancel()
			var wg sync.WaitGroup
			wg.Go(func() {
				sleepUntil(t0.Add(3500 * time.Millisecond))
				c.poll(pctx, otherTry, 50*time.Millisecond, callDL)
			})
			wg.Wait()
			bg.Wait()

			// L, on the healthy node, renewed all along.
			if end, ended := wL.ended(); ended {
				v.fail("L (TTL %v, on healthy node B) was told lost %v after its grant (%v after its grant's deadline): its renewals did not get through", shortTTL,
					end.Sub(wL.granted).Round(time.Millisecond), end.Sub(wL.granted.Add(shortTTL-drift(shortTTL))).Round(time.Millisecond))
			} else {
				tctx, tcancel := context.WithTimeout(ctx, time.Second)
				left, err := wL.l.TTL(tctx)
				tcancel()
				if err != nil {
					v.fail("L's Context is live but the server says: %v", err)
				} else {
					t.Logf("L held %v after its grant (%.1f TTLs), %v left on the server", time.Since(wL.granted).Round(time.Millisecond), float64(time.Since(wL.granted))/float64(shortTTL), left)
				}
			}
			if time.Since(wL.granted) < 2*shortTTL {
				t.Fatalf("the check came %v after L's grant: not past 2 of its TTLs", time.Since(wL.granted))
			}
			checkOverlap(v, wL, &c, slack)
			if c.refused.Load() == 0 {
				t.Errorf("the other client was never refused L (%d attempts, errors %v): it did not contend", c.attempts.Load(), c.errs)
			}
			v.late("the other client's TryLock (200 ms deadline) returned", c.lateAt, c.lateCall, acquireSlack)
			t.Logf("the other client: %d attempts, %d refused, %d granted, errors %v", c.attempts.Load(), c.refused.Load(), len(c.grants), c.errs)

			// The leases on the hung node, told in time.
			for i, w := range onAWatched {
				end, ok := w.ended()
				dl := w.deadline(faultAt)
				if !ok {
					v.late(fmt.Sprintf("lease %d on the hung node: loss never told; checked", i), time.Now(), time.Since(dl), slack)
					continue
				}
				t.Logf("lease %d on the hung node told lost %v after the hang began (deadline %v after)", i, end.Sub(faultAt).Round(time.Millisecond), dl.Sub(faultAt).Round(time.Millisecond))
				v.late(fmt.Sprintf("lease %d on the hung node: loss told", i), end, end.Sub(dl), slack)
			}
			v.report("hung cluster node, renewals beside it", d.name, "Mutex", 7+int(c.attempts.Load()), faults)
			releaseAll(wL.l)
		})
	}
}

// TestTimelyChunkReportsEachLease is issue 13's third case: two leases
// renewed by extend (not one script call) in one process, X on instances
// that hang and Y on healthy ones. Y's keys are deleted (as a restart or a
// failover without the grant would) and another client takes Y. Y's
// Context must end as soon as its own renewal finds it gone: within one
// renewal period (a third of its TTL) and its instance timeout after the
// deletion, plus slack, and never after Y's own deadline; X, whose
// instances hang past its TTL, is told by its deadline. X is either
//   - a Redlock over three instances, two of them hung (a quorum lost),
//     whose instance timeout is 3 s (a long one, as a distant deployment
//     may set; it must stay under the TTL); its first instance is Y's
//     first, through the same primitives.Client, so that X's renewals and
//     Y's go through one renewer (a Redlock's leases are renewed by its
//     first Client's), as they did through the process's one renewer of
//     extend-only leases before Clients; or
//   - a MultiLock over two names on different nodes of a Cluster, one of
//     which hangs: its renewal extends the names one after the other.
//     (Its Client is the Cluster's, Y's a standalone server's: their
//     renewals go through different renewers, and only the promise to Y
//     is checked.)
//
// Y is a Redlock of TTL 3 s over three healthy instances.
func TestTimelyChunkReportsEachLease(t *testing.T) {
	redistest.Require(t, "redis-cli")
	const (
		xTTL   = 3600 * time.Millisecond
		yTTL   = 3 * time.Second
		prefix = "c:"
	)
	// The Redlock default: a twentieth of the TTL, between 5 and 100 ms.
	yInstanceTimeout := min(max(yTTL/20, 5*time.Millisecond), 100*time.Millisecond)
	type flavour struct {
		name    string
		cluster bool // open needs a Cluster client
		// open returns X's acquisition and the hang and its undoing; y0
		// is the Client of Y's first instance.
		open func(t *testing.T, d driver, cd clusterDriver, y0 *primitives.Client) (lock acquireFunc, hang, resume func())
	}
	flavours := []flavour{
		{"Redlock on hung instances", false, func(t *testing.T, d driver, _ clusterDriver, y0 *primitives.Client) (acquireFunc, func(), func()) {
			cs := []*primitives.Client{y0} // shared with Y, healthy
			var srvs []*redistest.Server   // X's own, hung
			for range 2 {
				s := redistest.Start(t)
				srvs = append(srvs, s)
				cs = append(cs, clienttest.For(t, d.new(t, s.Addr)))
			}
			rl, err := primitives.NewRedlock(cs, "x", primitives.WithTTL(xTTL), primitives.WithPrefix(prefix), primitives.WithInstanceTimeout(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return rl.Lock, func() {
					for _, s := range srvs {
						s.Pause()
					}
				}, func() {
					for _, s := range srvs {
						s.Resume()
					}
				}
		}},
		{"split MultiLock on a hung Cluster node", true, func(t *testing.T, _ driver, cd clusterDriver, _ *primitives.Client) (acquireFunc, func(), func()) {
			cl := redistest.StartCluster(t, 3)
			keepHealthyNodesServing(t, cl)
			m := newClusterMap(t, cl)
			names := []string{m.namesOn(t, prefix, "xa", 0, 1)[0], m.namesOn(t, prefix, "xb", 1, 1)[0]}
			ml, err := primitives.NewMultiLock(clienttest.For(t, cd.new(t, cl.Addrs)), names, primitives.WithTTL(xTTL), primitives.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return ml.Lock, cl.Nodes[0].Pause, cl.Nodes[0].Resume
		}},
	}
	for fi, f := range flavours {
		for _, d := range lane.Subset(drivers, fi, 1) {
			t.Run(f.name+"/"+d.name, func(t *testing.T) {
				v := &verdict{t: t}
				cd, ok := clusterDriverFor(d)
				if !ok && f.cluster {
					t.Skipf("%s has no Cluster client", d.name)
				}
				var ySrvs []*redistest.Server
				var yB, otherB []backend.Backend
				for range 3 {
					s := redistest.Start(t)
					ySrvs = append(ySrvs, s)
					yB = append(yB, d.new(t, s.Addr))
					otherB = append(otherB, d.new(t, s.Addr))
				}
				// The process holding X and Y: a Client per server.
				yCs := clienttest.All(t, yB)
				xLock, hang, resume := f.open(t, d, cd, yCs[0])
				y, err := primitives.NewRedlock(yCs, "y", primitives.WithTTL(yTTL), primitives.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				yOther, err := primitives.NewRedlock(clienttest.All(t, otherB), "y", primitives.WithTTL(yTTL), primitives.WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				t0 := time.Now()
				yl, err := y.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				wY := watch(kRedlock, []string{"y"}, yTTL, t0, yl)
				defer wY.stopWait()
				xCalled := time.Now()
				xl, err := xLock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				wX := watch(kRedlock, []string{"x"}, xTTL, xCalled, xl)
				defer wX.stopWait()

				sleepUntil(t0.Add(400 * time.Millisecond))
				hang()
				faultAt := time.Now()
				t.Cleanup(resume)

				sleepUntil(t0.Add(500 * time.Millisecond))
				for _, s := range ySrvs {
					if _, err := s.Do(ctx, "DEL", keyspace.KeyBase(prefix, "y")); err != nil {
						t.Fatal(err)
					}
				}
				delAt := time.Now()
				tctx, tcancel := context.WithTimeout(ctx, time.Second)
				ol, err := yOther.TryLock(tctx)
				tcancel()
				if err != nil {
					t.Fatalf("another client could not take Y once its keys were deleted: %v", err)
				}
				defer ol.Release(context.Background())

				yEnd, yOK := wY.waitEnded(wY.deadline(delAt).Add(time.Second))
				xEnd, xOK := wX.waitEnded(wX.deadline(faultAt).Add(time.Second))
				// Y's first renewal after the deletion begins by a third of
				// its TTL after the last one (or its grant) began.
				soon := delAt.Add(yTTL/3 + yInstanceTimeout)
				if !delAt.After(wY.called.Add(yTTL / 4)) {
					soon = wY.granted.Add(yTTL/3 + yInstanceTimeout) // its first renewal finds it gone
				}
				if !yOK {
					v.late("Y, found gone by its renewal: loss never told; checked", time.Now(), time.Since(soon), slack)
				} else {
					t.Logf("Y told lost %v after its keys were deleted (its renewal was due %v after, its deadline %v after)", yEnd.Sub(delAt).Round(time.Millisecond),
						soon.Add(-yInstanceTimeout).Sub(delAt).Round(time.Millisecond), wY.deadline(delAt).Sub(delAt).Round(time.Millisecond))
					v.late("Y's loss was told (its renewal was due within a third of its TTL of the deletion)", yEnd, yEnd.Sub(soon), slack)
					v.late("Y's loss was told after its own deadline:", yEnd, yEnd.Sub(wY.deadline(delAt)), slack)
				}
				if !xOK {
					v.late("X, on hung instances: loss never told; checked", time.Now(), time.Since(wX.deadline(faultAt)), slack)
				} else {
					t.Logf("X told lost %v after the hang began (deadline %v after)", xEnd.Sub(faultAt).Round(time.Millisecond), wX.deadline(faultAt).Sub(faultAt).Round(time.Millisecond))
					v.late("X's loss was told", xEnd, xEnd.Sub(wX.deadline(faultAt)), slack)
				}
				v.report("extend-only renewals: one lease found gone beside one hanging", d.name, "Redlock (beside a "+f.name+")", 5, "Y's keys deleted and taken by another client while X's instances hang (SIGSTOP); Y must be told within a renewal period")
			})
		}
	}
}

// TestTimelyExtendBehindRenewal is issue 13's fourth case: Extend on a
// lease whose renewal is in flight against a hung server (SIGSTOP) must
// return within its own deadline (100 ms) plus slack, not wait for the
// renewal; and the lease is still told lost by its deadline. Every
// primitive at once, each on its own servers, every driver.
func TestTimelyExtendBehindRenewal(t *testing.T) {
	redistest.Require(t)
	const (
		ettl   = 3 * time.Second
		callDL = 100 * time.Millisecond
	)
	for _, d := range lane.Subset(drivers, 2, 1) {
		t.Run(d.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for _, k := range kinds {
				wg.Go(func() {
					t.Run(k.name, func(t *testing.T) {
						v := &verdict{t: t}
						var srvs []*redistest.Server
						var bs []backend.Backend
						for range k.instances {
							s := redistest.Start(t)
							srvs = append(srvs, s)
							bs = append(bs, d.new(t, s.Addr))
						}
						names := namesFor(k, "e")
						lock, _, err := k.open(clienttest.All(t, bs), names, false, primitives.WithTTL(ettl), primitives.WithPrefix("e:"))
						if err != nil {
							t.Fatal(err)
						}
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						called := time.Now()
						l, err := lock(ctx)
						if err != nil {
							t.Fatal(err)
						}
						w := watch(k, names, ettl, called, l)
						defer w.stopWait()
						// Hang before the renewal can begin (a quarter of
						// the TTL at the earliest); the renewal is due at a
						// third and is in flight after it.
						sleepUntil(called.Add(ettl/4 - 50*time.Millisecond))
						for _, s := range srvs {
							s.Pause()
						}
						faultAt := time.Now()
						defer func() {
							for _, s := range srvs {
								s.Resume()
							}
						}()
						sleepUntil(w.granted.Add(ettl/3 + 150*time.Millisecond))
						late, at, err := timedCall(callDL, func(ctx context.Context) error { return l.Extend(ctx, ettl) })
						t.Logf("Extend with a renewal in flight: %v after its %v deadline: %v", late.Round(time.Millisecond), callDL, err)
						v.late("Extend (100 ms deadline) behind a renewal in flight returned", at, late, slack)
						end, ok := w.waitEnded(w.deadline(faultAt).Add(time.Second))
						if !ok {
							v.late("loss never told; checked", time.Now(), time.Since(w.deadline(faultAt)), slack)
						} else {
							v.late("the loss was told", end, end.Sub(w.deadline(faultAt)), slack)
						}
						v.report("Extend behind a renewal in flight", d.name, k.name, 2, "server hung (SIGSTOP) before the first renewal (TTL 3 s); Extend with a 100 ms deadline while that renewal is in flight")
					})
				})
			}
			wg.Wait()
		})
	}
}
