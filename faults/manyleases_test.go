package faults_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

var long = flag.Bool("long", false, "run TestTimelyManyLeases at full size: 1,000 leases of TTL 1-60 s (about 6 minutes)")

// manySize is how many leases a TestTimelyManyLeases run holds, of which
// TTLs (log-uniform between minTTL and maxTTL), granted at random moments
// over spread.
type manySize struct {
	leases         int
	minTTL, maxTTL time.Duration
	spread         time.Duration
}

func manyLeasesSize() manySize {
	if *long {
		return manySize{leases: 1000, minTTL: time.Second, maxTTL: time.Minute, spread: 15 * time.Second}
	}
	if lane.Long() {
		return manySize{leases: 96, minTTL: 600 * time.Millisecond, maxTTL: 6 * time.Second, spread: 1500 * time.Millisecond}
	}
	return manySize{leases: 48, minTTL: 600 * time.Millisecond, maxTTL: 2 * time.Second, spread: time.Second}
}

// manyKinds are the primitives of TestTimelyManyLeases, one lease in
// len(manyKinds) of each.
var manyKinds = []kind{kMutex, kFairMutex, kMulti, kSem, kFairSem, kRWWrite, kRWRead, kRedlock}

// manyLease is one lease of a TestTimelyManyLeases run and its contender.
type manyLease struct {
	k      kind
	names  []string
	ttl    time.Duration
	at     time.Duration // when to take it, from the start
	doomed bool          // the fault cuts it off: it must be told lost
	w      *watched
	c      contender
	// holderLock and otherLock are the holder's and the contender's
	// acquisitions.
	holderLock, otherLock acquireFunc
}

// manyRig is the set-up of one TestTimelyManyLeases run.
type manyRig struct {
	// holder and other are the backends of the holding process and of the
	// contender: [0] for the single-server primitives, [1:4] the Redlock
	// instances. Each backend gets one Client (clienttest.For), so each
	// process has its own.
	holder, other []backend.Backend
	// doomed says whether a lease of k over names is cut off by the fault.
	doomed func(k kind, names []string) bool
	// doomedAtFault, when set, looks again just before the fault at a
	// lease doomed did not doom: whether what it holds then is cut off
	// (a Redlock granted by a bare quorum that includes the instance
	// about to hang).
	doomedAtFault func(k kind, names []string, l latchkit.Lease) bool
	// inject starts the fault, heal ends it.
	inject, heal func()
	// healBeforeCheckingContenders: the contenders of doomed leases can be
	// granted only once the fault heals (a hung node).
	healBeforeCheckingContenders bool
	// bystanders are leases on another client of the same servers, which
	// the fault does not touch (nil: the holder's own healthy leases
	// serve).
	bystander []backend.Backend
}

// TestTimelyManyLeases holds many leases of every primitive and of mixed
// TTLs in one process while a fault cuts off some of them:
//   - on a 3-master Redis Cluster (and 3 standalone instances for the
//     Redlocks), node A hangs (SIGSTOP), and so does one Redlock instance:
//     every lease with a name on A is doomed, the others (and every Redlock,
//     which keeps its quorum) must stay live; but a Redlock that holds only
//     a bare quorum including the hanging instance when the fault begins
//     is doomed too (an attempt or renewal can get through to a quorum
//     but not to every instance);
//   - on one Redis (and 3 for the Redlocks), only the holding client is
//     partitioned (its connections black-holed): all its leases are doomed,
//     while another client's leases (bystanders) stay live.
//
// The fault lasts past the longest TTL. Checked: every doomed lease is told
// lost by its deadline plus slack; every lease that stays healthy is still
// live at the end, past its first TTL, and held on the server; another
// client waiting (Lock) on every lease's names is never granted while the
// holder's Context is live, is granted every doomed one once it is free
// (after the fault heals, for a hung node), and has tried for every
// healthy one; calls (TryLock, Extend, Release with 200 ms deadlines) made
// during the fault return within their deadline plus slack.
//
// The fast lane holds 48 leases of TTL 0.6-2 s through one driver; the
// long lane 96 of TTL 0.6-6 s through each; -long 1,000 of TTL 1-60 s.
func TestTimelyManyLeases(t *testing.T) {
	redistest.Require(t, "redis-cli")
	size := manyLeasesSize()
	faultsCluster := fmt.Sprintf("%d leases of every primitive, TTL %v-%v, on a Cluster whose node A hangs (SIGSTOP) past the longest TTL, with one of the 3 Redlock instances; another client waits on every one", size.leases, size.minTTL, size.maxTTL)
	faultsPartition := fmt.Sprintf("%d leases of every primitive, TTL %v-%v, in a client partitioned (black-holed) past the longest TTL from one Redis and 3 Redlock instances; another client waits on every one", size.leases, size.minTTL, size.maxTTL)
	for _, d := range lane.Subset(drivers, 2, 1) {
		cd, ok := clusterDriverFor(d)
		t.Run("cluster node hangs/"+d.name, func(t *testing.T) {
			if !ok {
				t.Skipf("%s has no Cluster client", d.name)
			}
			cl := redistest.StartCluster(t, 3)
			keepHealthyNodesServing(t, cl)
			m := newClusterMap(t, cl)
			var rl []*redistest.Server
			rlRead := map[*redistest.Server]*redis.Client{} // to read which instances hold a Redlock
			for range 3 {
				s := redistest.Start(t)
				rl = append(rl, s)
				c := redis.NewClient(&redis.Options{Addr: s.Addr})
				t.Cleanup(func() { c.Close() })
				rlRead[s] = c
			}
			r := &manyRig{
				holder: []backend.Backend{cd.new(t, cl.Addrs)},
				other:  []backend.Backend{cd.new(t, cl.Addrs)},
				doomed: func(k kind, names []string) bool {
					if k.instances > 1 {
						return false // 2 of 3 Redlock instances stay
					}
					for _, n := range names {
						if m.nodeOf(t, "m:", n) == 0 {
							return true
						}
					}
					return false
				},
				doomedAtFault: func(k kind, names []string, l latchkit.Lease) bool {
					if k.instances == 1 {
						return false
					}
					held := 0
					for _, s := range rl[1:] {
						if v, _ := rlRead[s].Get(context.Background(), keyspace.KeyBase(manyPrefix, names[0])).Result(); strings.HasPrefix(v, l.Token()+" ") {
							held++
						}
					}
					return held < 2
				},
				inject:                       func() { cl.Nodes[0].Pause(); rl[0].Pause() },
				heal:                         func() { cl.Nodes[0].Resume(); rl[0].Resume() },
				healBeforeCheckingContenders: true,
			}
			for _, s := range rl {
				r.holder = append(r.holder, d.new(t, s.Addr))
				r.other = append(r.other, d.new(t, s.Addr))
			}
			manyLeases(t, r, size, "many leases, cluster node hangs", d.name, faultsCluster)
		})
		t.Run("one client partitioned/"+d.name, func(t *testing.T) {
			var srvs []*redistest.Server
			var pxs []*faultproxy.Proxy
			for range 4 {
				srvs = append(srvs, redistest.Start(t))
			}
			r := &manyRig{doomed: func(kind, []string) bool { return true }, inject: func() {
				for _, p := range pxs {
					p.Blackhole(true)
				}
			}, heal: func() {
				for _, p := range pxs {
					p.Blackhole(false)
				}
			}}
			for _, s := range srvs {
				px := faultproxy.Start(t, s.Addr)
				pxs = append(pxs, px)
				r.holder = append(r.holder, d.new(t, px.Addr))
				r.other = append(r.other, d.new(t, s.Addr))
				r.bystander = append(r.bystander, d.new(t, s.Addr))
			}
			manyLeases(t, r, size, "many leases, one client partitioned", d.name, faultsPartition)
		})
	}
}

// manyPrefix is the key prefix of TestTimelyManyLeases's primitives.
const manyPrefix = "m:"

func manyLeases(t *testing.T, r *manyRig, size manySize, scenario, driver, faults string) {
	const (
		prefix = manyPrefix
		callDL = 200 * time.Millisecond
	)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 13))
	t.Logf("seed %d", seed)
	verdicts := map[string]*verdict{}
	ops := map[string]int{}
	for _, k := range manyKinds {
		verdicts[k.name] = &verdict{t: t, maxLogs: 5}
	}
	open := func(k kind, bs []backend.Backend, names []string, read bool, extra ...primitives.Option) acquireFunc {
		if k.instances > 1 {
			bs = bs[1:4]
		}
		lock, _, err := k.open(clienttest.All(t, bs), names, read, append([]primitives.Option{primitives.WithPrefix(prefix)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		return lock
	}
	logTTL := func() time.Duration {
		lo, hi := math.Log(float64(size.minTTL)), math.Log(float64(size.maxTTL))
		return time.Duration(math.Exp(lo + rng.Float64()*(hi-lo))).Round(time.Millisecond)
	}

	// The leases, and the contenders' acquisitions of their names.
	var leases []*manyLease
	doomedN := 0
	for i := range size.leases {
		k := manyKinds[i%len(manyKinds)]
		ml := &manyLease{k: k, names: namesFor(k, fmt.Sprintf("n%d", i)), ttl: logTTL(), at: time.Duration(rng.Int64N(int64(size.spread)))}
		ml.doomed = r.doomed(k, ml.names)
		if ml.doomed {
			doomedN++
		}
		ml.holderLock = open(k, r.holder, ml.names, k.read, primitives.WithTTL(ml.ttl))
		ml.otherLock = open(k, r.other, ml.names, false, primitives.WithTTL(ml.ttl), primitives.WithMiddleware(attemptCounter(&ml.c.attempts)))
		leases = append(leases, ml)
	}
	if doomedN == 0 || (r.bystander == nil && doomedN == len(leases)) {
		t.Fatalf("%d of %d leases doomed: the scenario needs both kinds", doomedN, len(leases))
	}
	// Bystanders: a lease of every primitive on a client the fault leaves
	// alone.
	var bystanders []*manyLease
	for i, k := range manyKinds {
		if r.bystander == nil {
			break
		}
		ml := &manyLease{k: k, names: namesFor(k, fmt.Sprintf("b%d", i)), ttl: logTTL(), at: time.Duration(rng.Int64N(int64(size.spread)))}
		ml.holderLock = open(k, r.bystander, ml.names, k.read, primitives.WithTTL(ml.ttl))
		ml.otherLock = open(k, r.other, ml.names, false, primitives.WithTTL(ml.ttl), primitives.WithMiddleware(attemptCounter(&ml.c.attempts)))
		bystanders = append(bystanders, ml)
	}
	all := append(append([]*manyLease{}, leases...), bystanders...)

	// Extra leases for the calls made during the fault: two Mutexes to
	// extend, two to release, and two names to TryLock, all doomed.
	var doomedNames []string
	for i := 0; len(doomedNames) < 6; i++ {
		if n := fmt.Sprintf("call%d", i); r.doomed(kMutex, []string{n}) {
			doomedNames = append(doomedNames, n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), size.maxTTL+size.spread+time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, ml := range all {
		wg.Go(func() {
			sleepUntil(start.Add(ml.at))
			lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
			defer lcancel()
			called := time.Now()
			l, err := ml.holderLock(lctx)
			if err != nil {
				t.Errorf("%s %v: %v", ml.k.name, ml.names, err)
				return
			}
			ml.w = watch(ml.k, ml.names, ml.ttl, called, l)
		})
	}
	var callLeases []latchkit.Lease
	for _, n := range doomedNames[:4] {
		l, err := open(kMutex, r.holder, []string{n}, false, primitives.WithTTL(size.maxTTL))(ctx)
		if err != nil {
			t.Fatal(err)
		}
		callLeases = append(callLeases, l)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	defer func() {
		for _, ml := range all {
			ml.w.stopWait()
		}
	}()
	t.Logf("%d leases (%d doomed, %d bystanders) granted in %v", len(all), doomedN, len(bystanders), time.Since(start).Round(time.Millisecond))

	// Let renewals run a while, then the fault.
	sleepUntil(start.Add(size.spread + size.minTTL))
	if r.doomedAtFault != nil {
		for _, ml := range leases {
			if !ml.doomed && r.doomedAtFault(ml.k, ml.names, ml.w.l) {
				ml.doomed = true
				t.Logf("%s %v (TTL %v) holds a bare quorum with the instance about to hang: doomed", ml.k.name, ml.names, ml.ttl)
			}
		}
	}
	r.inject()
	faultAt := time.Now()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			r.heal()
		}
	}
	defer heal()
	checkAt := faultAt.Add(size.maxTTL + slack + 200*time.Millisecond)
	otherEnd := checkAt
	if r.healBeforeCheckingContenders {
		otherEnd = checkAt.Add(3 * time.Second)
	}
	octx, ocancel := context.WithDeadline(ctx, otherEnd)
	defer ocancel()
	var cwg sync.WaitGroup
	for _, ml := range all {
		cwg.Go(func() { ml.c.run(octx, ml.otherLock) })
	}

	// The calls during the fault.
	var callWG sync.WaitGroup
	var callMu sync.Mutex
	var callLate []time.Duration
	call := func(what string, f func(ctx context.Context) error) {
		callWG.Go(func() {
			late, at, err := timedCall(callDL, f)
			callMu.Lock()
			callLate = append(callLate, late)
			callMu.Unlock()
			verdicts[kMutex.name].late(fmt.Sprintf("%s during the fault (200 ms deadline, %v) returned", what, err), at, late, callSlack(what, slack))
		})
	}
	sleepUntil(faultAt.Add(300 * time.Millisecond))
	for _, l := range callLeases[:2] {
		call("Extend", func(ctx context.Context) error { return l.Extend(ctx, size.maxTTL) })
	}
	for _, l := range callLeases[2:4] {
		call("Release", l.Release)
	}
	for _, n := range doomedNames[4:] {
		try := func() acquireFunc {
			k := kMutex
			_, try, err := k.open(clienttest.All(t, r.holder[:1]), []string{n}, false, primitives.WithPrefix(prefix), primitives.WithTTL(size.maxTTL))
			if err != nil {
				t.Fatal(err)
			}
			return try
		}()
		call("TryLock", func(ctx context.Context) error {
			l, err := try(ctx)
			if err == nil {
				l.Release(ctx)
			}
			return err
		})
	}

	// Once every doomed lease is past its deadline: told in time, and the
	// healthy ones live, past their first TTL, held on the server.
	sleepUntil(checkAt)
	callWG.Wait()
	ops[kMutex.name] += len(callLate)
	var lateness []time.Duration
	healthy, stillLive := 0, 0
	var twg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, ml := range all {
		v := verdicts[ml.k.name]
		ops[ml.k.name]++
		end, ended := ml.w.ended()
		if ml.doomed {
			dl := ml.w.deadline(faultAt)
			if !ended {
				v.late(fmt.Sprintf("%s %v (TTL %v): loss never told; checked", ml.k.name, ml.names, ml.ttl), time.Now(), time.Since(dl), slack)
				lateness = append(lateness, time.Since(dl))
				continue
			}
			lateness = append(lateness, end.Sub(dl))
			v.late(fmt.Sprintf("%s %v (TTL %v): loss told", ml.k.name, ml.names, ml.ttl), end, end.Sub(dl), slack)
			continue
		}
		healthy++
		if ended {
			v.fail("%s %v (TTL %v), which the fault did not touch, was told lost %v after the fault began (granted %v before it; the process's timers ran up to %v late in its last TTL): %v", ml.k.name, ml.names, ml.ttl,
				end.Sub(faultAt).Round(time.Millisecond), faultAt.Sub(ml.w.granted).Round(time.Millisecond),
				stallWithin(end.Add(-ml.ttl), end).Round(time.Millisecond), context.Cause(ml.w.l.Context()))
			continue
		}
		stillLive++
		if time.Since(ml.w.granted) < ml.ttl {
			t.Fatalf("%s %v checked %v after its grant, within its TTL %v", ml.k.name, ml.names, time.Since(ml.w.granted), ml.ttl)
		}
		sem <- struct{}{}
		twg.Go(func() {
			defer func() { <-sem }()
			tctx, tcancel := context.WithTimeout(ctx, time.Second)
			defer tcancel()
			if _, err := ml.w.l.TTL(tctx); err != nil {
				v.fail("%s %v: Context live, but the server says: %v", ml.k.name, ml.names, err)
			}
		})
	}
	twg.Wait()
	t.Logf("doomed leases told lost, lateness after their deadline: %s", summarize(lateness))
	t.Logf("%d healthy leases, %d still live at the check; calls during the fault, lateness: %s", healthy, stillLive, summarize(callLate))
	if healthy == 0 {
		t.Fatal("no healthy lease: nothing shows renewals went on")
	}

	// The contenders.
	if r.healBeforeCheckingContenders {
		heal()
	}
	cwg.Wait()
	heal()
	for _, ml := range all {
		v := verdicts[ml.k.name]
		ops[ml.k.name] += int(ml.c.attempts.Load())
		checkOverlap(v, ml.w, &ml.c, slack)
		v.late(fmt.Sprintf("%s %v: the other client's Lock", ml.k.name, ml.names), ml.c.lateAt, ml.c.lateCall, acquireSlack)
		_, granted := ml.c.firstGrant()
		switch {
		case ml.c.attempts.Load() == 0:
			t.Errorf("%s %v: the other client never made an attempt (errors %v)", ml.k.name, ml.names, ml.c.errs)
		case ml.doomed && !granted:
			t.Errorf("%s %v: the other client (%d attempts) was never granted it once it was free (errors %v)", ml.k.name, ml.names, ml.c.attempts.Load(), ml.c.errs)
		}
	}
	for _, k := range manyKinds {
		verdicts[k.name].report(scenario, driver, k.name, ops[k.name], faults)
	}
	var left []latchkit.Lease
	for _, ml := range all {
		left = append(left, ml.w.l)
	}
	releaseAll(append(left, callLeases...)...)
}

// summarize gives the count, median, 99th percentile and maximum of ds.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration{}, ds...)
	sortDurations(s)
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("%d: median %v, p99 %v, max %v", len(s), q(.5), q(.99), q(1))
}
