package contracttest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// Server is a Redis deployment the suite runs against, started by the test
// on loopback and stopped with it. A driver's Harness embeds it: the
// deployment knows how to move its clock, drop its subscribers and flush
// its scripts; the Harness adds how its driver connects to it.
type Server interface {
	// Kind is the deployment: "miniredis", "redis-server", "cluster" or
	// "sentinel".
	Kind() string
	// Addrs are what a client is given: the server's address; every
	// master of a Cluster; the sentinels of a Sentinel deployment (whose
	// master set is SentinelMaster).
	Addrs() []string
	// AdvanceClock moves the server's clock forward by d (see Harness).
	AdvanceClock(t testing.TB, d time.Duration) bool
	// KillSubscribers closes every connection in pub/sub mode (see
	// Harness).
	KillSubscribers(t testing.TB) bool
	// FlushScripts empties the script cache of every server of the
	// deployment (see Harness).
	FlushScripts(t testing.TB) bool
}

// SentinelMaster is the master set of a "sentinel" Server.
const SentinelMaster = redistest.SentinelMaster

// Deployment is a kind of Server and how to start one.
type Deployment struct {
	Kind  string
	Start func(t testing.TB) Server
	Long  bool // runs in the long lane only
}

// Deployments are the servers the suite runs on: miniredis (embedded),
// and, when redis-server is installed (see redistest.Require), a real
// redis-server, a 3-master Cluster and a Sentinel deployment. Long marks
// the deployments that run in the long lane only (see internal/testrig/lane):
// starting them and running the suite through them takes minutes.
var Deployments = []Deployment{
	{"miniredis", StartMiniredis, false},
	{"redis-server", StartRedisServer, false},
	{"cluster", StartCluster, true},
	{"sentinel", StartSentinel, true},
}

// RunDeployments runs the suite on every Deployment, a subtest each, with
// the Harness harness makes for it: a driver's whole conformance run. The
// deployments run side by side (each has its own servers, and the suite
// spends most of its time waiting on timers); those marked Long are
// skipped in the fast lane, where each group of the suite runs on a
// deployment of its own, beside the others (a group may hang its server,
// move its clock or read its command counts).
func RunDeployments(t *testing.T, harness func(Server) Harness) {
	RunDeploymentsExcept(t, nil, harness)
}

// RunDeploymentsExcept is RunDeployments for a driver that cannot serve
// some deployments (a single-server driver and a Cluster): the subtest of
// each Kind in skip is skipped, with the reason skip gives, without
// starting its servers.
func RunDeploymentsExcept(t *testing.T, skip map[string]string, harness func(Server) Harness) {
	if harness == nil {
		t.Fatal("contracttest: nil Harness maker: give the driver's")
	}
	for _, d := range Deployments {
		t.Run(d.Kind, func(t *testing.T) {
			if why, ok := skip[d.Kind]; ok {
				t.Skip(why)
			}
			if d.Long {
				lane.LongOnly(t, "a "+d.Kind+" deployment takes seconds to start and the suite a minute through it")
			}
			t.Parallel()
			if !d.Long && !lane.Long() {
				runGroupsApart(t, func(t *testing.T) Harness { return harness(d.Start(t)) })
				return
			}
			Run(t, harness(d.Start(t)))
		})
	}
}

// mini is an embedded miniredis whose clock follows real time (so TTLs run
// out as on a real server) and can be moved forward on demand: a ticker sets
// its clock to now+offset every millisecond, with ClockTTL making key expiry
// follow that clock, TIME included.
type mini struct {
	m *miniredis.Miniredis
	// addr is m's address, read once: miniredis's Addr panics once the
	// server is closed, and a call abandoned by a test may dial it after.
	addr string
	// mu makes reading offset and setting the time one step: a tick that
	// read the offset before an AdvanceClock and set the time after it
	// would move the clock back by the advance (seen: a FairSemaphore
	// holder's 400 ms TTL still had 399 ms left after a 500 ms advance).
	mu     sync.Mutex
	offset time.Duration
}

// tick sets the server's time to the client's clock plus the offset, after
// adding d to the offset.
func (s *mini) tick(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
	s.m.SetTime(time.Now().Add(s.offset))
}

// StartMiniredis starts an embedded miniredis.
func StartMiniredis(t testing.TB) Server {
	m := miniredis.RunT(t)
	s := &mini{m: m, addr: m.Addr()}
	s.m.SetTime(time.Now())
	s.m.ClockTTL(true)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.tick(0)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return s
}

func (s *mini) Kind() string    { return "miniredis" }
func (s *mini) Addrs() []string { return []string{s.addr} }

func (s *mini) AdvanceClock(t testing.TB, d time.Duration) bool {
	s.tick(d)
	return true
}

// KillSubscribers restarts miniredis on the same port, which drops every
// connection (miniredis has no CLIENT KILL); the data stays.
func (s *mini) KillSubscribers(t testing.TB) bool {
	s.m.Close()
	if err := s.m.Restart(); err != nil {
		t.Fatalf("restart miniredis: %v", err)
	}
	return true
}

func (s *mini) FlushScripts(t testing.TB) bool {
	command(t, s.addr, "SCRIPT", "FLUSH")
	return true
}

// real is a redis-server started by the test on a free loopback port.
type real struct{ s *redistest.Server }

// StartRedisServer starts a redis-server (it skips the test when none is
// installed, unless LATCHKIT_REQUIRE_REDIS=1).
func StartRedisServer(t testing.TB) Server { return real{redistest.Start(t)} }

func (r real) Kind() string                                { return "redis-server" }
func (r real) Addrs() []string                             { return []string{r.s.Addr} }
func (r real) AdvanceClock(testing.TB, time.Duration) bool { return false }
func (r real) KillSubscribers(t testing.TB) bool           { return killSubscribers(t, r.s.Addr) }
func (r real) FlushScripts(t testing.TB) bool              { command(t, r.s.Addr, "SCRIPT", "FLUSH"); return true }
func killSubscribers(t testing.TB, addrs ...string) bool {
	return each(t, addrs, "CLIENT", "KILL", "TYPE", "pubsub")
}
func each(t testing.TB, addrs []string, args ...string) bool {
	for _, a := range addrs {
		command(t, a, args...)
	}
	return true
}

// cluster is a 3-master Redis Cluster started by the test on loopback.
type cluster struct{ c *redistest.Cluster }

// StartCluster starts a Redis Cluster of 3 masters.
func StartCluster(t testing.TB) Server { return cluster{redistest.StartCluster(t, 3)} }

func (c cluster) Kind() string                                { return "cluster" }
func (c cluster) Addrs() []string                             { return c.c.Addrs }
func (c cluster) AdvanceClock(testing.TB, time.Duration) bool { return false }
func (c cluster) KillSubscribers(t testing.TB) bool           { return killSubscribers(t, c.c.Addrs...) }
func (c cluster) FlushScripts(t testing.TB) bool              { return each(t, c.c.Addrs, "SCRIPT", "FLUSH") }

// sentinel is a Sentinel-managed master with one replica and three
// sentinels, started by the test on loopback; clients find the master
// through the sentinels.
type sentinel struct{ s *redistest.Sentinel }

// StartSentinel starts a master, a replica and three sentinels.
func StartSentinel(t testing.TB) Server { return sentinel{redistest.StartSentinel(t)} }

// SentinelOf returns the deployment behind a "sentinel" Server, for tests
// that fail its master over.
func SentinelOf(s Server) (*redistest.Sentinel, bool) {
	ss, ok := s.(sentinel)
	return ss.s, ok
}

func (s sentinel) Kind() string                                { return "sentinel" }
func (s sentinel) Addrs() []string                             { return s.s.Addrs }
func (s sentinel) AdvanceClock(testing.TB, time.Duration) bool { return false }
func (s sentinel) KillSubscribers(t testing.TB) bool           { return killSubscribers(t, s.master(t)) }
func (s sentinel) FlushScripts(t testing.TB) bool {
	return each(t, []string{s.master(t)}, "SCRIPT", "FLUSH")
}

func (s sentinel) master(t testing.TB) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := s.s.MasterAddr(ctx)
	if err != nil {
		t.Fatalf("sentinel master: %v", err)
	}
	return addr
}

// command sends one command to addr on a connection of its own and fails
// the test on an error reply. It speaks RESP itself: the suite knows no
// driver.
func command(t testing.TB, addr string, args ...string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	if strings.HasPrefix(line, "-") {
		t.Fatalf("%s %v: %s", addr, args, strings.TrimSpace(line))
	}
}
