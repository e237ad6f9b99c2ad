package faults_test

// TestNemesis: seeded, replayable sequences of faults (issue 15). The
// fault suite's other tests inject one fault per run; here a seed
// generates a schedule of many (pauses, kills with empty restarts,
// FLUSHALLs, partitions of one client, and their ends), at random times,
// within a fault budget for a Redlock, while clients take and give back
// the lock; the history is then checked: exclusion, fences never
// backwards, every call back by its deadline. A failure prints the seed,
// the schedule and the offending grants; -nemesis.seed replays it.
//
//	go test ./faults/ -run TestNemesis                             # the default seeds
//	go test ./faults/ -run TestNemesis -args -nemesis.seed=N       # replay seed N
//	go test ./faults/ -run TestNemesis -timeout 1h -args -nemesis.seeds=2000 -nemesis.parallel=3

import (
	"context"
	"flag"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

var (
	nemSeed     = flag.Uint64("nemesis.seed", 0, "replay this one seed of TestNemesis (its topology, driver and primitive follow from it)")
	nemSeeds    = flag.Int("nemesis.seeds", lane.Pick(3, 16), "how many seeds TestNemesis runs, from -nemesis.first (default 3 in the fast lane: one Redlock, one single Redis, one Cluster; 16 in the long lane)")
	nemFirst    = flag.Uint64("nemesis.first", 1, "the first seed TestNemesis runs")
	nemParallel = flag.Int("nemesis.parallel", 1, "how many seeds of a configuration run at once")
	nemLimit    = flag.Int("nemesis.budget", -1, "let the generator impair this many Redlock instances at once (default N - quorum); the checker still judges by N - quorum")
	nemStrict   = flag.Bool("nemesis.strict", false, "count a Redlock's overlaps across an instance's data loss as violations (see nemRules.strict)")
	nemGrace    = flag.Duration("nemesis.grace", -1, "how long a pause or partition impairs a Redlock instance after it ends, for the generator and the checker (default: see nemGraceDefault)")
)

// The runs' timing. Holds are short next to the TTL, so that a lease
// granted while an instance could not take part is over before that
// instance counts as whole again (see budget).
const (
	nemTTL             = 400 * time.Millisecond // auto-extend renews every 133ms
	nemInstanceTimeout = 40 * time.Millisecond  // Redlock, per instance and call
	nemMaxHold         = 150 * time.Millisecond
	nemCallDeadline    = 500 * time.Millisecond // every Lock, TryLock and Release
	nemClients         = 4
	nemLength          = 1500 * time.Millisecond // faults until then
	nemTail            = 400 * time.Millisecond  // then everything healed, clients on
	nemRedlockN        = 5

	// nemGraceDefault: a stale lock on an instance after a pause or
	// partition lives at most a TTL after it ended (late bytes are
	// delivered then); a lease granted without that instance lives at
	// most its attempt's two rounds and the longest hold after.
	nemGraceDefault = nemTTL + nemMaxHold + 2*nemInstanceTimeout + 120*time.Millisecond
	// nemRecover: how long the generator counts a lost instance impaired
	// once it is back and whole, for a grant to have restored it.
	nemRecover = 250 * time.Millisecond
	// nemAttempt: how long before a grant returned its attempt may have
	// run (its two rounds and scheduling), for the checker's restoring
	// of lost instances.
	nemAttempt = 2*nemInstanceTimeout + 150*time.Millisecond
)

func nemesisGrace() time.Duration {
	if *nemGrace >= 0 {
		return *nemGrace
	}
	return nemGraceDefault
}

// nemConfig is a topology with a driver (and, for a single Redis, a
// primitive).
type nemConfig struct {
	name    string
	redlock bool
	driver  driver
	prim    prim // single Redis, Cluster
	// cluster, when set, is the driver's Cluster client: the primitive
	// runs on a Redis Cluster of nemClusterN masters, whose lock's slot
	// moves between them.
	cluster *clusterDriver
}

// nemClusterN is the number of masters of the nemesis's Cluster.
const nemClusterN = 3

func (c nemConfig) instances() int {
	switch {
	case c.redlock:
		return nemRedlockN
	case c.cluster != nil:
		return nemClusterN
	}
	return 1
}

func (c nemConfig) genConfig() genConfig {
	g := genConfig{instances: c.instances(), clients: nemClients, limit: -1,
		grace: nemesisGrace(), recover: nemRecover, length: nemLength,
		minGap: 20 * time.Millisecond, maxGap: 300 * time.Millisecond, cluster: c.cluster != nil}
	if c.redlock {
		g.limit = nemRedlockN - (nemRedlockN/2 + 1)
		if *nemLimit >= 0 {
			g.limit = *nemLimit
		}
	}
	return g
}

// nemConfigFor is the configuration seed runs on: even seeds a Redlock
// (each driver in turn), so that half the seeds go to the Redlock, whose
// failures need more runs to show; of the odd seeds, those of the form
// 4k+1 a single Redis and those of the form 4k+3 a Cluster (each driver
// and primitive in turn).
func nemConfigFor(cfgs []nemConfig, seed uint64) nemConfig {
	var redlock, single, cluster []nemConfig
	for _, c := range cfgs {
		switch {
		case c.redlock:
			redlock = append(redlock, c)
		case c.cluster != nil:
			cluster = append(cluster, c)
		default:
			single = append(single, c)
		}
	}
	switch seed % 4 {
	case 0, 2:
		return redlock[(seed/2)%uint64(len(redlock))]
	case 1:
		return single[(seed/4)%uint64(len(single))]
	}
	return cluster[(seed/4)%uint64(len(cluster))]
}

// nemConfigs are the topologies, drivers and primitives.
func nemConfigs() []nemConfig {
	var out []nemConfig
	for _, d := range drivers {
		out = append(out, nemConfig{name: "redlock/" + d.name, redlock: true, driver: d})
	}
	for _, p := range prims {
		switch p.name {
		case "Mutex", "Semaphore(2)", "FairMutex":
			for _, d := range drivers {
				out = append(out, nemConfig{name: "single/" + d.name + "/" + p.name, driver: d, prim: p})
				if cd, ok := clusterDriverFor(d); ok {
					out = append(out, nemConfig{name: "cluster/" + d.name + "/" + p.name, driver: d, prim: p, cluster: &cd})
				}
			}
		}
	}
	return out
}

// nemRig is one run's servers, proxies and clients.
type nemRig struct {
	cfg     nemConfig
	srvs    []*redistest.Server
	cl      *redistest.Cluster    // cluster: srvs are its masters, in the schedule's order
	slot    int                   // cluster: the lock's slot
	owner   int                   // cluster: the index in srvs of the master it is on
	proxies [][]*faultproxy.Proxy // [client][instance]
	lock    []acquireFunc
	try     []acquireFunc
	limit   int
	hist    *nemHistory
	base    time.Time
}

func newNemRig(t *testing.T, cfg nemConfig) *nemRig {
	r := &nemRig{cfg: cfg, hist: &nemHistory{failures: map[string]int{}}, limit: 1}
	opts := []primitives.Option{primitives.WithTTL(nemTTL), primitives.WithPrefix("n:"),
		primitives.WithWaiterTimeout(600 * time.Millisecond)}
	if cfg.cluster != nil {
		r.startCluster(t)
		for c := 0; c < nemClients; c++ {
			lock, try, _, err := cfg.prim.open(clienttest.For(t, cfg.cluster.new(t, r.cl.Addrs)), c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			r.lock, r.try = append(r.lock, lock), append(r.try, try)
			r.limit = cfg.prim.limit
		}
		return r
	}
	for i := 0; i < cfg.instances(); i++ {
		r.srvs = append(r.srvs, redistest.Start(t))
	}
	for c := 0; c < nemClients; c++ {
		var pxs []*faultproxy.Proxy
		var bs []backend.Backend
		for _, s := range r.srvs {
			px := faultproxy.Start(t, s.Addr)
			pxs = append(pxs, px)
			bs = append(bs, cfg.driver.new(t, px.Addr))
		}
		r.proxies = append(r.proxies, pxs)
		if cfg.redlock {
			rl, err := primitives.NewRedlock(clienttest.All(t, bs), "res", append(clienttest.Fitting[primitives.RedlockOption](opts), primitives.WithInstanceTimeout(nemInstanceTimeout))...)
			if err != nil {
				t.Fatal(err)
			}
			r.lock, r.try = append(r.lock, rl.Lock), append(r.try, rl.TryLock)
			continue
		}
		lock, try, _, err := cfg.prim.open(clienttest.For(t, bs[0]), c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		r.lock, r.try = append(r.lock, lock), append(r.try, try)
		r.limit = cfg.prim.limit
	}
	return r
}

func (r *nemRig) now() time.Duration { return time.Since(r.base) }

// holdFor is how long a client holds a grant: mostly briefly, sometimes
// long enough for a renewal or two.
func holdFor(rng *rand.Rand) time.Duration {
	if rng.IntN(4) == 0 {
		return time.Duration(40+rng.IntN(int(nemMaxHold/time.Millisecond)-40)) * time.Millisecond
	}
	return time.Duration(1+rng.IntN(20)) * time.Millisecond
}

// work runs client c until stop: a waiting Lock (a TryLock one time in
// four), a hold, a Release; every call with nemCallDeadline.
func (r *nemRig) work(c int, rng *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		acquire, what := r.lock[c], "lock"
		if rng.IntN(4) == 0 {
			acquire, what = r.try[c], "trylock"
		}
		hold := holdFor(rng)
		ctx, cancel := context.WithTimeout(context.Background(), nemCallDeadline)
		t0 := time.Now()
		called := r.now()
		l, err := acquire(ctx)
		cancel()
		r.hist.call(what, c, called, time.Since(t0), nemCallDeadline, err)
		if err != nil {
			time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
			continue
		}
		h := nemHold{client: c, fence: l.Fence(), called: called, start: r.now()}
		var mu sync.Mutex
		var lostAt time.Duration
		lost := false
		stopWatch := context.AfterFunc(l.Context(), func() {
			mu.Lock()
			lostAt, lost = r.now(), true
			mu.Unlock()
		})
		select {
		case <-time.After(hold):
		case <-l.Context().Done():
		case <-stop:
		}
		h.end = r.now()
		stopWatch()
		mu.Lock()
		if lost {
			h.end, h.lost = lostAt, true
		}
		mu.Unlock()
		r.hist.add(h)
		ctx, cancel = context.WithTimeout(context.Background(), nemCallDeadline)
		t0 = time.Now()
		called = r.now()
		err = l.Release(ctx)
		cancel()
		r.hist.call("release", c, called, time.Since(t0), nemCallDeadline, err)
	}
}

// do runs one step.
func (r *nemRig) do(t *testing.T, s nemStep) {
	switch s.Kind {
	case nemCalm:
	case nemPause:
		r.srvs[s.Inst].Pause()
	case nemResume:
		r.srvs[s.Inst].Resume()
	case nemKill:
		r.srvs[s.Inst].Kill()
	case nemRestart:
		r.srvs[s.Inst].Restart(t)
	case nemFlush:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := r.srvs[s.Inst].Do(ctx, "FLUSHALL"); err != nil {
			t.Errorf("FLUSHALL on %s: %v", instName(s.Inst), err)
		}
	case nemPartition:
		r.proxies[s.Client][s.Inst].Blackhole(true)
	case nemHeal:
		r.proxies[s.Client][s.Inst].Blackhole(false)
	case nemMigrate:
		r.migrate(t, s.Inst)
	}
}

// startCluster starts the Cluster of a cluster configuration, lets the
// masters left serve while one is down (as the faults need), and orders
// srvs so that the lock's slot is on srvs[0], where schedules begin.
func (r *nemRig) startCluster(t *testing.T) {
	r.cl = redistest.StartCluster(t, nemClusterN)
	keepHealthyNodesServing(t, r.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slot, err := r.cl.Slot(ctx, keyspace.KeyBase("n:", "res"))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := r.cl.Owner(ctx, 0, slot)
	if err != nil {
		t.Fatal(err)
	}
	r.slot = slot
	r.srvs = append([]*redistest.Server{r.cl.Nodes[owner]}, slices.Delete(slices.Clone(r.cl.Nodes), owner, owner+1)...)
}

// migrate moves the lock's slot, and its keys, from the master it is on
// to srvs[to] (both up and running: the schedule sees to it), retrying
// for up to 3 s what a master just restarted refuses. The schedule has
// the slot on to from then on, whatever happens: a migration that fails
// fails the test.
func (r *nemRig) migrate(t *testing.T, to int) {
	node := func(i int) int { return slices.Index(r.cl.Nodes, r.srvs[i]) }
	from := r.owner
	r.owner = to
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	begun := false
	for {
		var err error
		if !begun {
			err = r.cl.BeginMigration(ctx, r.slot, node(from), node(to))
			begun = err == nil
		}
		if begun {
			if _, err = r.cl.MoveKeys(ctx, r.slot, node(from), node(to)); err == nil {
				if err = r.cl.EndMigration(ctx, r.slot, node(from), node(to)); err == nil {
					return
				}
			}
		}
		if ctx.Err() != nil {
			t.Errorf("migrating the lock's slot from %s to %s: %v", instName(from), instName(to), err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// execute runs the schedule's steps at their times from r.base, each
// after the one before: a step that runs late (a restart takes a while)
// delays those after it as much, so that steps never come closer together
// than planned.
func (r *nemRig) execute(t *testing.T, s nemSchedule, out *[]executedStep) {
	var lag time.Duration
	for _, st := range s.Steps {
		if d := time.Until(r.base.Add(st.At + lag)); d > 0 {
			time.Sleep(d)
		}
		began := r.now()
		r.do(t, st)
		ended := r.now()
		lag = max(lag, ended-st.At)
		*out = append(*out, executedStep{nemStep: st, began: began, ended: ended})
	}
}

// nemResult is one seed's outcome.
type nemResult struct {
	seed       uint64
	cfg        string
	ops, steps int
	grants     int
	violations []nemViolation
}

func (n nemResult) counted() (v, excused int) {
	for _, x := range n.violations {
		if x.excused == "" {
			v++
		} else {
			excused++
		}
	}
	return
}

// runNemesis runs seed on cfg: a fresh rig, the schedule executed while
// the clients work, then the check.
func runNemesis(t *testing.T, cfg nemConfig, seed uint64, verbose bool) nemResult {
	s := generate(seed, cfg.genConfig())
	r := newNemRig(t, cfg)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	r.base = time.Now()
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() { defer close(watchDone); r.hist.watchScheduler(r.now, stopWatch) }()
	defer func() { close(stopWatch); <-watchDone }()
	for c := 0; c < nemClients; c++ {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(seed, uint64(1000+c)))
		go func() {
			defer wg.Done()
			r.work(c, rng, stop)
		}()
	}
	var steps []executedStep
	func() {
		done := make(chan struct{})
		go func() { // Restart may t.Fatal: not on the test's goroutine
			defer close(done)
			r.execute(t, s, &steps) // the steps that ran, whatever happens
		}()
		<-done
	}()
	// The clients run on for nemTail after the last step (which may have
	// run late: see execute).
	last := s.Length
	if n := len(steps); n > 0 {
		last = max(last, steps[n-1].ended)
	}
	if d := time.Until(r.base.Add(last + nemTail)); d > 0 {
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	end := r.now()

	rules := nemRules{limit: r.limit, redlock: cfg.redlock, attempt: nemAttempt, strict: *nemStrict}
	if cfg.redlock {
		rules.budget = newBudget(nemRedlockN, nemRedlockN-(nemRedlockN/2+1), nemesisGrace(), 0)
	}
	res := nemResult{seed: seed, cfg: cfg.name, ops: r.hist.ops, steps: len(s.Steps), grants: len(r.hist.holds)}
	res.violations = checkNemesis(rules, r.hist, steps, end)
	v, excused := res.counted()
	actual := make([]time.Duration, len(steps))
	for i, st := range steps {
		actual[i] = st.began
	}
	if v > 0 || verbose {
		t.Logf("seed %d on %s: %d steps, %d grants, %d ops; schedule:\n%s", seed, cfg.name, len(s.Steps), len(r.hist.holds), r.hist.ops, s.format(actual))
	}
	shown := map[string]int{}
	for _, x := range res.violations {
		if x.excused != "" {
			if verbose && shown["excused"] < 5 {
				shown["excused"]++
				t.Logf("not a violation, %s: %s: %s", x.excused, x.kind, x.text)
			}
			continue
		}
		if shown[x.kind]++; shown[x.kind] <= 3 {
			t.Errorf("seed %d on %s: %s: %s", seed, cfg.name, x.kind, x.text)
		}
	}
	for k, n := range shown {
		if k != "excused" && n > 3 {
			t.Errorf("seed %d on %s: %d %s violations in all", seed, cfg.name, n, k)
		}
	}
	if v > 0 {
		t.Logf("replay: go test ./faults/ -run TestNemesis -args -nemesis.seed=%d%s", seed, nemFlagsNote())
	}
	if verbose || v > 0 {
		t.Logf("%d violations (%d more excused); failures: %v", v, excused, r.hist.failures)
	}
	return res
}

// nemFlagsNote repeats the flags that change schedules, for a replay.
func nemFlagsNote() string {
	var s string
	if *nemLimit >= 0 {
		s += fmt.Sprintf(" -nemesis.budget=%d", *nemLimit)
	}
	if *nemGrace >= 0 {
		s += fmt.Sprintf(" -nemesis.grace=%v", *nemGrace)
	}
	if *nemStrict {
		s += " -nemesis.strict"
	}
	return s
}

func TestNemesis(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	cfgs := nemConfigs()
	seeds := map[string][]uint64{}
	if *nemSeed != 0 {
		c := nemConfigFor(cfgs, *nemSeed)
		seeds[c.name] = []uint64{*nemSeed}
	} else {
		for s := *nemFirst; s < *nemFirst+uint64(*nemSeeds); s++ {
			c := nemConfigFor(cfgs, s)
			seeds[c.name] = append(seeds[c.name], s)
		}
	}
	start := time.Now()
	var mu sync.Mutex
	results := map[string][]nemResult{}
	for _, cfg := range cfgs {
		if len(seeds[cfg.name]) == 0 {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) {
			// -nemesis.parallel runners take the seeds in turn (t.Run may
			// be called from several goroutines at once).
			queue := make(chan uint64, len(seeds[cfg.name]))
			for _, seed := range seeds[cfg.name] {
				queue <- seed
			}
			close(queue)
			var wg sync.WaitGroup
			for range max(*nemParallel, 1) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seed := range queue {
						t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
							res := runNemesis(t, cfg, seed, *nemSeed != 0)
							mu.Lock()
							results[cfg.name] = append(results[cfg.name], res)
							mu.Unlock()
						})
					}
				}()
			}
			wg.Wait()
		})
	}
	took := time.Since(start)

	// The summary, and a row per topology and driver for RELIABILITY.md.
	type agg struct {
		seeds, steps, ops, grants, v, excused int
		failed                                []string
		excusedBy                             map[string][]string // reason -> "seed (kind)"
	}
	rows := map[string]*agg{}
	var order []string
	total, failed := 0, 0
	for _, cfg := range cfgs {
		key := topoOf(cfg) + "|" + cfg.driver.name
		a := rows[key]
		if a == nil {
			a = &agg{excusedBy: map[string][]string{}}
			rows[key] = a
			order = append(order, key)
		}
		for _, res := range results[cfg.name] {
			v, ex := res.counted()
			a.seeds++
			a.steps += res.steps
			a.ops += res.ops
			a.grants += res.grants
			a.v += v
			a.excused += ex
			total++
			byReason := map[string]map[string]int{}
			for _, x := range res.violations {
				if x.excused != "" {
					reason := x.excused
					for _, r := range []string{"outside the fault budget", "across a data loss", "starved"} {
						if strings.HasPrefix(reason, r) {
							reason = r
						}
					}
					if byReason[reason] == nil {
						byReason[reason] = map[string]int{}
					}
					byReason[reason][x.kind]++
				}
			}
			for reason, kinds := range byReason {
				a.excusedBy[reason] = append(a.excusedBy[reason], fmt.Sprintf("%d (%s)", res.seed, kindList(kinds)))
			}
			if v > 0 {
				failed++
				kinds := map[string]int{}
				for _, x := range res.violations {
					if x.excused == "" {
						kinds[x.kind]++
					}
				}
				what := kindList(kinds)
				if !cfg.redlock {
					what = cfg.prim.name + ": " + what
				}
				a.failed = append(a.failed, fmt.Sprintf("%d (%s)", res.seed, what))
			}
		}
	}
	t.Logf("nemesis: %d seeds in %v, %d with violations", total, took.Round(time.Millisecond), failed)
	for _, key := range order {
		a := rows[key]
		if a.seeds == 0 {
			continue
		}
		topo, drv, _ := strings.Cut(key, "|")
		t.Logf("  %s, %s: %d seeds, %d steps, %d grants, %d ops, %d violations (%d excused); failing seeds: %s",
			topo, drv, a.seeds, a.steps, a.grants, a.ops, a.v, a.excused, orNone(a.failed))
		for _, reason := range slices.Sorted(maps.Keys(a.excusedBy)) {
			seeds := a.excusedBy[reason]
			if len(seeds) > 20 {
				seeds = append(seeds[:20:20], fmt.Sprintf("and %d more", len(seeds)-20))
			}
			t.Logf("    excused, %s: seeds %s", reason, strings.Join(seeds, ", "))
		}
		prim, faults := "Mutex, Semaphore(2), FairMutex", fmt.Sprintf(
			"%d seeds of random steps 20-300ms apart (%d in all): SIGSTOP, SIGCONT, SIGKILL, restart empty, FLUSHALL, one client's connections black-holed, healed", a.seeds, a.steps)
		if strings.HasPrefix(topo, "Redis Cluster") {
			faults = fmt.Sprintf("%d seeds of random steps 20-300ms apart (%d in all): the lock's slot moved between masters with its keys, SIGSTOP, SIGCONT, SIGKILL, restart empty, FLUSHALL of a master", a.seeds, a.steps)
		}
		if strings.HasPrefix(topo, "Redlock") {
			prim = "Redlock(5)"
			faults = fmt.Sprintf("%d seeds of random steps 20-300ms apart (%d in all): SIGSTOP, SIGCONT, SIGKILL, restart empty, FLUSHALL, one client's connections to one instance black-holed, healed; at most 2 of 5 instances impaired at once (grace %v)", a.seeds, a.steps, nemesisGrace())
		}
		if a.excused > 0 {
			faults += fmt.Sprintf("; %d more not counted (%s)", a.excused, strings.Join(slices.Sorted(maps.Keys(a.excusedBy)), ", "))
		}
		table.mu.Lock()
		table.rows = append(table.rows, row{"nemesis: " + topo, drv, prim, a.ops, faults, a.v})
		table.mu.Unlock()
	}
}

func topoOf(c nemConfig) string {
	switch {
	case c.redlock:
		return fmt.Sprintf("Redlock over %d redis-server", nemRedlockN)
	case c.cluster != nil:
		return fmt.Sprintf("Redis Cluster of %d masters", nemClusterN)
	}
	return "one redis-server"
}

func kindList(m map[string]int) string {
	var ks []string
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
