// Package faults_test injects faults between latchkit and a real
// redis-server (latency, connection resets, a partition of one client, a
// hung server, a restarted server) while clients take and give back every
// kind of primitive, records what each client held and when, and checks
// the history: the limit never broken while leases were valid by the
// client's own reckoning, a lost lease told through its Context before its
// TTL ran out, fences never backwards while Redis kept its data, every call
// back within its deadline, and the primitive working again once the fault
// heals, without a new client.
//
// LATCHKIT_LONG=1 go test ./faults/ -args -report=../RELIABILITY.md writes
// the table of RELIABILITY.md from a long-lane run. Plain go test (the fast
// lane) runs each scenario once, through one driver, at a small size; the
// long lane (LATCHKIT_LONG=1, see internal/testrig/lane) every driver, primitive and
// seed at full size.
package faults_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rg "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lredigo "github.com/latchkit/latchkit/backend/redigo"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

var reportPath = flag.String("report", "", "write the reliability table (Markdown) to this file")

// table collects one row per scenario run for -report.
var table struct {
	mu   sync.Mutex
	rows []row
}

type row struct {
	scenario, driver, primitive string
	ops                         int
	faults                      string
	violations                  int
}

func TestMain(m *testing.M) {
	flag.Parse()
	lane.Widen()
	driverLog := redistest.LimitGoRedisLog(os.Stderr, 3)
	start := time.Now()
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go watchScheduler(stopWatch, watchDone)
	code := m.Run()
	close(stopWatch)
	<-watchDone
	if code == 0 && *reportPath != "" {
		if err := writeReport(*reportPath, time.Since(start)); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			code = 1
		}
	}
	if code == 0 {
		code = leakcheck.Check()
	}
	if sum := driverLog.Summary(); sum != "" {
		fmt.Fprintln(os.Stderr, sum)
	}
	os.Exit(code)
}

// ttl is the lease time of every scenario: auto-extend renews every 267ms.
const ttl = 800 * time.Millisecond

// callDeadline bounds every Lock and Release; margin is how late a call
// may return after its deadline.
const (
	callDeadline = time.Second
	margin       = 500 * time.Millisecond
)

// driver makes a client of addr.
type driver struct {
	name string
	new  func(t *testing.T, addr string) backend.Backend
}

var drivers = []driver{
	{"go-redis", func(t *testing.T, addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			DialTimeout: 200 * time.Millisecond, DialerRetries: 1, PoolSize: 8})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c, goredis.WithHealthCheck(300*time.Millisecond))
	}},
	{"rueidis", func(t *testing.T, addr string) backend.Backend {
		c := dialed(t, func() (rd.Client, error) {
			return rd.NewClient(rd.ClientOption{InitAddress: []string{addr},
				Dialer: net.Dialer{Timeout: 200 * time.Millisecond}, ConnWriteTimeout: 500 * time.Millisecond})
		})
		t.Cleanup(c.Close)
		return lrueidis.New(c)
	}},
	{"valkey", func(t *testing.T, addr string) backend.Backend {
		c := dialed(t, func() (vk.Client, error) {
			return vk.NewClient(vk.ClientOption{InitAddress: []string{addr},
				Dialer: net.Dialer{Timeout: 200 * time.Millisecond}, ConnWriteTimeout: 500 * time.Millisecond})
		})
		t.Cleanup(c.Close)
		return lvalkey.New(c)
	}},
	{"redigo", func(t *testing.T, addr string) backend.Backend {
		p := &rg.Pool{DialContext: func(ctx context.Context) (rg.Conn, error) {
			return rg.DialContext(ctx, "tcp", addr, rg.DialConnectTimeout(200*time.Millisecond), rg.DialWriteTimeout(500*time.Millisecond))
		}, MaxIdle: 8}
		t.Cleanup(func() { p.Close() })
		return lredigo.New(p, lredigo.WithHealthCheck(300*time.Millisecond))
	}},
}

// dialed makes a client with newClient, trying up to 5 times: rueidis and
// valkey-go dial when a client is made, and beside busy processes a 200 ms
// dial can time out (seen once in 400 runs under the hog; a Cluster
// client's dial of 3 nodes while other packages' tests ran, too). That is
// the set-up failing, not the primitive, so it tries again.
func dialed[C any](t testing.TB, newClient func() (C, error)) C {
	t.Helper()
	var c C
	var err error
	for try := 0; try < 5; try++ {
		if c, err = newClient(); err == nil {
			return c
		}
	}
	t.Fatal(err)
	return c
}

// prim is a primitive under test: limit holders at once, of which an
// exclusive one must be alone.
type prim struct {
	name  string
	limit int
	// open returns worker w's acquisition on cl (waiting and single
	// attempt) and whether it is exclusive.
	open func(cl *primitives.Client, w int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error)
}

type acquireFunc = func(context.Context) (latchkit.Lease, error)

func mutexPrim(name string, ctor func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error)) prim {
	return prim{name, 1, func(cl *primitives.Client, _ int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error) {
		m, err := ctor(cl, "res", opts...)
		if err != nil {
			return nil, nil, false, err
		}
		return m.Lock, m.TryLock, true, nil
	}}
}

func semPrim(name string, ctor func(*primitives.Client, string, int, ...primitives.Option) (primitives.Semaphore, error)) prim {
	return prim{name, 2, func(cl *primitives.Client, _ int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error) {
		s, err := ctor(cl, "res", 2, opts...)
		if err != nil {
			return nil, nil, false, err
		}
		return s.Acquire, s.TryAcquire, false, nil
	}}
}

// weightedPrim is a semaphore of 4 permits whose every worker takes 2 at
// once (AcquireN): the checker counts holders against a limit of 2, so a
// grant that ignored the weights (a third holder of 2) is a violation.
func weightedPrim(name string, ctor func(*primitives.Client, string, int, ...primitives.Option) (primitives.Semaphore, error)) prim {
	return prim{name, 2, func(cl *primitives.Client, _ int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error) {
		s, err := ctor(cl, "res", 4, opts...)
		if err != nil {
			return nil, nil, false, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return s.AcquireN(ctx, 2) },
			func(ctx context.Context) (latchkit.Lease, error) { return s.TryAcquireN(ctx, 2) }, false, nil
	}}
}

var prims = []prim{
	mutexPrim("Mutex", primitives.NewMutex),
	mutexPrim("FairMutex", primitives.NewFairMutex),
	mutexPrim("MultiLock", func(cl *primitives.Client, _ string, opts ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewMultiLock(cl, []string{"res", "res2"}, opts...)
	}),
	semPrim("Semaphore(2)", primitives.NewSemaphore),
	semPrim("FairSemaphore(2)", primitives.NewFairSemaphore),
	weightedPrim("Semaphore(4) by 2s", primitives.NewSemaphore),
	weightedPrim("FairSemaphore(4) by 2s", primitives.NewFairSemaphore),
	{"RWLock", 1 << 30, func(cl *primitives.Client, w int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error) {
		l, err := primitives.NewRWLock(cl, "res", opts...)
		if err != nil {
			return nil, nil, false, err
		}
		if w%2 == 0 {
			return l.Lock, l.TryLock, true, nil
		}
		return l.RLock, l.TryRLock, false, nil
	}},
	{"Election", 1, func(cl *primitives.Client, w int, opts ...primitives.Option) (lock, try acquireFunc, exclusive bool, err error) {
		e, err := primitives.NewElection(cl, "res", opts...)
		if err != nil {
			return nil, nil, false, err
		}
		me := fmt.Sprintf("worker-%d", w)
		return func(ctx context.Context) (latchkit.Lease, error) { return e.Campaign(ctx, me) },
			func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, me) }, true, nil
	}},
}

// hold is one grant as its client saw it.
type hold struct {
	worker    int
	exclusive bool
	fence     int64
	called    time.Time // Lock was called: the grant came after
	start     time.Time // Lock returned
	end       time.Time // Release called, or the Context ended first
	lost      bool      // the Context ended before Release was called
	epoch     int       // Redis restarts before the grant
}

// history is what the workers recorded.
type history struct {
	mu       sync.Mutex
	holds    []hold
	ops      int
	slow     []rigSlow // calls past their deadline plus margin
	epoch    int
	failures map[string]int // errors by kind, for the log
}

func (h *history) add(x hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, x)
}

func (h *history) call(what string, start time.Time, err error) {
	took := time.Since(start)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops++
	if took > callDeadline+margin {
		h.slow = append(h.slow, rigSlow{fmt.Sprintf("%s took %v (%v)", what, took.Round(time.Millisecond), err), start.Add(took), took - callDeadline})
	}
	if err != nil {
		k := err.Error()
		if len(k) > 60 {
			k = k[:60]
		}
		h.failures[what+": "+k]++
	}
}

// rigSlow is a call that returned late past its deadline, at end.
type rigSlow struct {
	text string
	end  time.Time
	late time.Duration
}

// rig is one scenario's set-up: a redis-server and, per worker, a proxy to
// it and a client through that proxy.
type rig struct {
	srv     *redistest.Server
	proxies []*faultproxy.Proxy
	acquire []func(context.Context) (latchkit.Lease, error)
	excl    []bool
	limit   int
	ttl     time.Duration // the primitives' TTL; 0: the const ttl
	hist    *history
	// holdingNow[w] is set while worker w holds a grant.
	holdingNow [workers]atomic.Bool
}

const workers = 4

func newRig(t *testing.T, d driver, p prim) *rig {
	r := &rig{srv: redistest.Start(t), limit: p.limit, hist: &history{failures: map[string]int{}}}
	for w := 0; w < workers; w++ {
		px := faultproxy.Start(t, r.srv.Addr)
		b := d.new(t, px.Addr)
		acq, _, excl, err := p.open(clienttest.For(t, b), w, primitives.WithTTL(ttl), primitives.WithPrefix("f:"))
		if err != nil {
			t.Fatal(err)
		}
		r.proxies, r.acquire, r.excl = append(r.proxies, px), append(r.acquire, acq), append(r.excl, excl)
	}
	return r
}

// leaseTTL is the TTL of r's primitives.
func (r *rig) leaseTTL() time.Duration {
	if r.ttl > 0 {
		return r.ttl
	}
	return ttl
}

// work runs worker w until stop: Lock, hold for holdFor (or until the lease
// is lost), Release; every call with callDeadline.
func (r *rig) work(w int, holdFor func() time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		t0 := time.Now()
		l, err := r.acquire[w](ctx)
		cancel()
		r.hist.call("lock", t0, err)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		r.hist.mu.Lock()
		epoch := r.hist.epoch
		r.hist.mu.Unlock()
		h := hold{worker: w, exclusive: r.excl[w], fence: l.Fence(), called: t0, start: time.Now(), epoch: epoch}
		r.holdingNow[w].Store(true)
		var lostAt time.Time
		var lostMu sync.Mutex
		stopWatch := context.AfterFunc(l.Context(), func() {
			lostMu.Lock()
			lostAt = time.Now()
			lostMu.Unlock()
		})
		select {
		case <-time.After(holdFor()):
		case <-l.Context().Done():
		case <-stop:
		}
		h.end = time.Now()
		r.holdingNow[w].Store(false)
		stopWatch()
		lostMu.Lock()
		if !lostAt.IsZero() {
			h.end, h.lost = lostAt, true
		}
		lostMu.Unlock()
		r.hist.add(h)
		ctx, cancel = context.WithTimeout(context.Background(), callDeadline)
		t0 = time.Now()
		err = l.Release(ctx)
		cancel()
		r.hist.call("release", t0, err)
	}
}

// run drives the workers for d while fault runs, then stops them.
func (r *rig) run(d time.Duration, holdFor func(w int) time.Duration, fault func(stop <-chan struct{})) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(w, func() time.Duration { return holdFor(w) }, stop)
		}()
	}
	faultDone := make(chan struct{})
	go func() { defer close(faultDone); fault(stop) }()
	time.Sleep(d)
	close(stop)
	<-faultDone
	wg.Wait()
}

// check verifies the history and the healed primitive; it returns the
// number of violations and logs each.
func (r *rig) check(t *testing.T, fencesAcrossEpochs bool) int {
	t.Helper()
	h := r.hist
	violations := 0
	fail := func(format string, a ...any) {
		violations++
		t.Errorf(format, a...)
	}
	// The limit, while leases were valid by their clients' reckoning.
	type ev struct {
		at    time.Time
		delta int
		h     hold
	}
	var evs []ev
	for _, x := range h.holds {
		evs = append(evs, ev{x.start, +1, x}, ev{x.end, -1, x})
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].delta < evs[j].delta // ends first
		}
		return evs[i].at.Before(evs[j].at)
	})
	active := map[int]hold{}
	for _, e := range evs {
		if e.delta < 0 {
			delete(active, e.h.worker)
			continue
		}
		active[e.h.worker] = e.h
		excl := 0
		for _, a := range active {
			if a.exclusive {
				excl++
			}
		}
		if (excl > 0 && len(active) > 1) || len(active) > r.limit {
			fail("at %v: %d holders (%d exclusive) at once, limit %d: %+v", e.at.Format("15:04:05.000"), len(active), excl, r.limit, active)
		}
	}
	// A lost lease was told before its TTL ran out.
	for _, x := range h.holds {
		if x.lost && x.end.After(x.start.Add(r.leaseTTL())) {
			fail("worker %d learned of its lost lease %v after its ttl", x.worker, x.end.Sub(x.start.Add(r.leaseTTL())))
		}
	}
	// Fences: a grant asked for after another ended (so granted after it)
	// has a higher fence, while Redis kept its data.
	for _, a := range h.holds {
		for _, b := range h.holds {
			if a.end.Before(b.called) && b.fence <= a.fence && (a.epoch == b.epoch || fencesAcrossEpochs) {
				fail("fence %d of a grant after one with fence %d", b.fence, a.fence)
			}
		}
	}
	// A call past its deadline by more than the margin, unless the
	// process's own timers ran at least as late as the excess meanwhile
	// (the scheduler watch: a starved process, as the timeliness tests
	// and the nemesis excuse it).
	for _, s := range h.slow {
		if st := stallWithin(s.end.Add(-s.late), s.end); s.late-margin <= st {
			t.Logf("a call past its deadline: %s: excused, the process's own timers ran %v late meanwhile", s.text, st.Round(time.Millisecond))
			continue
		}
		fail("a call past its deadline: %s", s.text)
	}
	// Healed: every client works again.
	for w := range r.acquire {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := r.acquire[w](ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		cancel()
		if err != nil {
			fail("worker %d after the fault healed: %v", w, err)
		}
	}
	// Nothing an interrupted call left behind (a slot, a ticket) blocks
	// beyond its TTL and waiter timeout: every permit can be held at once.
	if r.limit > 1 && r.limit <= workers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var held []latchkit.Lease
		for w := 0; w < r.limit; w++ {
			l, err := r.acquire[w](ctx)
			if err != nil {
				fail("after the fault healed, permit %d of %d: %v", w+1, r.limit, err)
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Release(ctx)
		}
		cancel()
	}
	if len(h.holds) == 0 {
		fail("no grant at all")
	}
	t.Logf("%d ops, %d grants (%d lost); failures: %v", h.ops, len(h.holds), countLost(h.holds), h.failures)
	return violations
}

func countLost(hs []hold) int {
	n := 0
	for _, h := range hs {
		if h.lost {
			n++
		}
	}
	return n
}

// scenario is a fault, injected into a rig while its workers run.
type scenario struct {
	name, faults string
	// inject runs the fault; it must return once stop is closed.
	inject func(t *testing.T, r *rig, stop <-chan struct{})
	// holdFor is how long worker w holds each grant.
	holdFor func(w int) time.Duration
	// fencesAcrossEpochs is false when Redis loses its data (a restart).
	fencesAcrossEpochs bool
	// withDefaults: the scenario also runs through the drivers with their
	// default options (defaultDrivers), where it is the driver's handling
	// of deadlines that is tested.
	withDefaults bool
}

func short(int) time.Duration { return 15 * time.Millisecond }

// sleepOr sleeps d or until stop.
func sleepOr(d time.Duration, stop <-chan struct{}) bool {
	select {
	case <-time.After(d):
		return true
	case <-stop:
		return false
	}
}

var scenarios = []scenario{
	{name: "latency", faults: "350ms latency on every connection for 1s (renewals every 267ms)", holdFor: func(int) time.Duration { return 400 * time.Millisecond },
		fencesAcrossEpochs: true,
		inject: func(t *testing.T, r *rig, stop <-chan struct{}) {
			if !sleepOr(300*time.Millisecond, stop) {
				return
			}
			for _, p := range r.proxies {
				p.SetLatency(350 * time.Millisecond)
			}
			sleepOr(time.Second, stop)
			for _, p := range r.proxies {
				p.SetLatency(0)
			}
		}},
	{name: "resets", faults: "a connection reset every 20ms, for 1.2s (mid-acquire, mid-release)", holdFor: short, fencesAcrossEpochs: true,
		inject: func(t *testing.T, r *rig, stop <-chan struct{}) {
			end := time.Now().Add(1200 * time.Millisecond)
			for time.Now().Before(end) && sleepOr(20*time.Millisecond, stop) {
				r.proxies[rand.IntN(len(r.proxies))].ResetAll()
			}
		}},
	{name: "partition", faults: "the holder's connections black-holed for 2 TTLs while it holds", fencesAcrossEpochs: true, withDefaults: true,
		holdFor: func(w int) time.Duration {
			if w == 0 {
				return 3 * time.Second // the holder: holds until it learns it lost
			}
			return 15 * time.Millisecond
		},
		inject: func(t *testing.T, r *rig, stop <-chan struct{}) {
			// Wait until worker 0 holds, then cut it off.
			for !holding(r, 0) {
				if !sleepOr(5*time.Millisecond, stop) {
					return
				}
			}
			r.proxies[0].Blackhole(true)
			sleepOr(2*ttl, stop)
			r.proxies[0].Blackhole(false)
		}},
	{name: "hang", faults: "redis-server stopped (SIGSTOP) for 1.2 TTLs, then continued", holdFor: short, fencesAcrossEpochs: true, withDefaults: true,
		inject: func(t *testing.T, r *rig, stop <-chan struct{}) {
			if !sleepOr(300*time.Millisecond, stop) {
				return
			}
			r.srv.Pause()
			time.Sleep(ttl * 6 / 5)
			r.srv.Resume()
		}},
	{name: "restart", faults: "redis-server killed (SIGKILL, data gone) and restarted", holdFor: short, fencesAcrossEpochs: false,
		inject: func(t *testing.T, r *rig, stop <-chan struct{}) {
			if !sleepOr(400*time.Millisecond, stop) {
				return
			}
			r.srv.Kill()
			r.hist.mu.Lock()
			r.hist.epoch++
			r.hist.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
			r.srv.Restart(t)
		}},
}

// holding reports whether worker w holds a grant right now.
func holding(r *rig, w int) bool { return r.holdingNow[w].Load() }

// TestFaults runs every scenario through every driver (and, where the
// scenario says, the default-configured ones) and every primitive in the
// long lane; the fast lane runs each scenario once through one driver,
// rotating across the four (and one default-configured driver where the
// scenario has them), with two of the primitives, rotating so that every
// primitive meets a fault.
func TestFaults(t *testing.T) {
	redistest.Require(t)
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ds := lane.Subset(drivers, i, 1)
			if sc.withDefaults {
				// i+1: the hang meets go-redis as most users configure
				// it (deadlines ignored) in the fast lane.
				ds = append(ds, lane.Subset(defaultDrivers, i+1, 1)...)
			}
			for _, d := range ds {
				for _, p := range lane.Subset(prims, i, 2) {
					t.Run(d.name+"/"+p.name, func(t *testing.T) {
						lane.ParallelFast(t) // a rig of its own each
						r := newRig(t, d, p)
						r.run(2500*time.Millisecond, sc.holdFor, func(stop <-chan struct{}) { sc.inject(t, r, stop) })
						v := r.check(t, sc.fencesAcrossEpochs)
						table.mu.Lock()
						table.rows = append(table.rows, row{sc.name, d.name, p.name, r.hist.ops, sc.faults, v})
						table.mu.Unlock()
					})
				}
			}
		})
	}
}

// writeReport writes RELIABILITY.md: what was run, how, and the table.
func writeReport(path string, took time.Duration) error {
	table.mu.Lock()
	defer table.mu.Unlock()
	var b strings.Builder
	b.WriteString(`# Reliability

What latchkit does when things go wrong, measured by the fault suite in
` + "`faults/`" + ` against real ` + "`redis-server`" + ` processes it starts on loopback, through
every driver. Regenerate this file with:

    LATCHKIT_LONG=1 go test ./faults/ -count=1 -timeout 60m -args -report=../RELIABILITY.md

Each run drives 4 clients (each with its own connections, through its own
fault-injecting TCP proxy) taking and giving back one primitive for 2.5 s
(TTL 800 ms, auto-extend on) while the fault is injected, then checks the
recorded history. A violation is any of: more holders at once than the
primitive allows while their leases were valid by their clients' own
reckoning (until Release was called or lease.Context() ended); a lost lease
whose Context ended after its TTL; a grant asked for after another ended
with a lower fence (while Redis kept its data); a call returning more than
500 ms after its 1 s deadline; a client that cannot take the primitive again
once the fault healed. Goroutine leaks fail the whole run (goleak).

Not checked across a restart: a Redis restarted without persistence forgets
every lock, so a second holder can be granted one that a first still
believes it has until its next renewal (at most TTL/3) tells it; see
docs/guarantees.md, "What it does not promise". Fences restart with the data too.

Drivers marked "(default options)" are clients made with nothing but the
address, as most users write them: go-redis then ignores context deadlines
(no ContextTimeoutEnabled); rueidis and valkey-go keep their defaults.

The rows of the scenarios "writes paused", "hung cluster node, renewals
beside it", "extend-only renewals: ...", "Extend behind a renewal in
flight", "many leases, ..." and "CPU-starved client, partitioned" come from
the timeliness tests (` + "`faults/timely_test.go`" + ` and the files beside it), each
with its own set-up, given in its faults column. There a violation is any
of: a lost lease whose Context ended more than 150 ms (the tests' ` + "`slack`" + `,
the Go scheduler's lateness on a busy 2-core machine) after its deadline by
the holder's clock (the start of the granting call, or of the last renewal
that could have succeeded, plus the TTL, minus the drift allowance); a lease
the fault did not touch told lost; another client granted while a holder's
Context was live (by more than the slack); an Extend or Release returning
more than the slack after its deadline, a Lock or TryLock more than the
slack plus 100 ms (the give-back a give-up makes first, which latchkit's
deadline promise includes). A lateness past the slack during which the
test process's own timers ran at least as late (a goroutine that sleeps 5
ms at a time notes every wake-up more than 10 ms late: the process was
starved, by the busy processes beside it, the race detector or a
collection) is the scheduler's, not latchkit's: it is logged as excused
and not counted, as the nemesis does; one the process's timers do not
account for is a violation. ` + "`-args -long`" + ` runs "many leases" at full size
(1,000 leases of TTL 1-60 s).

The "nemesis" rows come from ` + "`TestNemesis`" + ` (` + "`faults/nemesis_test.go`" + `): each seed
generates a schedule of random faults 20-300 ms apart for 1.5 s (SIGSTOP and
SIGCONT, SIGKILL and a restart without data, FLUSHALL, one client's proxy
black-holed and healed), after which everything heals, while 4 clients take
and give back the lock (TTL 400 ms). On the Redlock of 5 instances the
schedule keeps at most 2 impaired at once (its fault budget: paused, down or
partitioned from a client, for a grace after a pause or partition ends, and
after a data loss until a grant restored the instance), and a violation is
an overlap of valid leases or a fence not above that of a grant that ended
before it was asked for, while the run stayed within the budget. On one
Redis, and on a Redis Cluster of 3 masters (where the schedule also moves
the lock's slot, with its keys, between two masters that are up and
running, and partitions nobody: its clients reach the nodes directly), a
violation is such a fence across data losses too, or an overlap not
across a data loss (a kill or FLUSHALL of any master counts as one). Anywhere, a call back more than 250 ms after its 500 ms
deadline is one. ` + "`-args -nemesis.seeds=2000 -nemesis.parallel=3`" + ` runs more
seeds, ` + "`-args -nemesis.seed=N`" + ` replays one.

The "resharding, failover" rows come from ` + "`TestReshardRun`" + ` (` + "`faults/reshard_run_test.go`" + `):
on a Redis Cluster of 3 masters with a replica each, every primitive's 4
clients (through the Cluster client of the driver named, TTL 800 ms) run
while the slots of its names move between masters (each kept migrating
150 ms: Redis answers TRYAGAIN and ASK meanwhile), then a master fails over
on request and another is killed, its replica taking over. The "Sentinel
failover to a stale replica" rows come from ` + "`TestSentinelRun`" + `
(` + "`faults/sentinel_run_test.go`" + `, TTL 3 s, every client with ` + "`WithReplicaAck`" + `).
A violation is what it is in the fault runs above. ` + "`-args -reshard.long`" + `
moves slots for 20 s instead of 3.

The "latch count-downs" rows come from ` + "`TestLatchFaults`" + ` (` + "`faults/latch_test.go`" + `):
5 rounds of a countdown latch set to 5 (the setter's reply dropped every
other round), counted down by 4 clients through proxies that drop the
reply after the server ran the call, run it twice, reset the connection
mid-call or add 150 ms of latency (which makes a go-redis client with a
100 ms read timeout send the call again, several times), then by a fifth,
direct, while two waiters wait (one's subscription reset). A violation is a
count read below the count-downs not yet started or other than 1 once the 4
returned (a call counted twice or lost), a waiter back before the fifth
count-down started or not within 3 s of it, a failed call, or a
TrySetCount on the open latch reporting false.

`)
	fmt.Fprintf(&b, "| scenario | driver | primitive | operations | faults injected | violations |\n|---|---|---|---|---|---|\n")
	for _, r := range table.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %d |\n", r.scenario, r.driver, r.primitive, r.ops, r.faults, r.violations)
	}
	fmt.Fprintf(&b, "\n%d runs in %v (go test without -race).\n", len(table.rows), took.Round(time.Second))
	b.WriteString(`
The broken lock's row is expected to show a violation: it is the check that
the linearizability checker catches a lock without atomic check-and-set.
`)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
