package faults_test

import (
	"context"
	"flag"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

var reshardLong = flag.Bool("reshard.long", false, "TestReshardRun: migrate slots for 20 s per run instead of 3 s")

// reshardFaults says what TestReshardRun injects, for RELIABILITY.md.
const reshardFaults = "slots of the primitive's names moved between masters every 250-400 ms (each kept MIGRATING 150 ms, keys moved, handed over), " +
	"a manual failover (CLUSTER FAILOVER) of one name's master, then that name's new master killed (SIGKILL) until its replica took over, restarted as a replica"

// TestReshardRun is issue 20's resharding run: on a Cluster of 3 masters
// with a replica each, every primitive (each its own rig of 4 clients,
// TTL 800 ms, the fault suite's workers and checks) is taken and given back
// through every Cluster client, with and without WithReplicaAck(1, 100ms),
// while the slots of its names move back and forth between masters, one
// of those masters fails over on request, and then one is killed, its
// replica taking over (cluster-node-timeout 2 s: longer than the TTL, so
// no lease outlives its master, acknowledged or not) and the killed node
// coming back as a replica. Checked as every fault run (rig.check):
// exclusion while leases are valid, lost leases told before their TTL,
// fences above those of grants that ended before, every call back within
// its deadline plus the margin, every client working once the faults
// end. Each (driver, acknowledgement) is one Cluster, the primitives'
// rigs running at once on it under their own prefixes (the hash tag is
// the name: every rig's "res" is in the same slot).
func TestReshardRun(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // a Cluster of its own
	migrateFor := 3 * time.Second
	if *reshardLong {
		migrateFor = 20 * time.Second
	}
	// The fast lane: one Cluster client, its grants acknowledged by the
	// replicas (the harder mode: WAIT rides through the failover too).
	for _, cd := range lane.Subset(clusterDrivers, 1, 1) {
		for _, acked := range lane.Subset([]bool{false, true}, 1, 1) {
			mode := "plain grants"
			if acked {
				mode = "WithReplicaAck(1, 100ms)"
			}
			t.Run(cd.name+"/"+mode, func(t *testing.T) {
				cl := redistest.StartClusterWithReplicas(t, 3, 1)
				ctx := reshardCtx(t, 5*time.Minute)
				opts := func(i int) []primitives.Option {
					o := []primitives.Option{primitives.WithTTL(ttl), primitives.WithPrefix(fmt.Sprintf("rs%d:", i))}
					if acked {
						o = append(o, primitives.WithReplicaAck(1, 100*time.Millisecond))
					}
					return o
				}
				rigs := primRigs(t, ttl, opts, func() backend.Backend { return cd.new(t, cl.Addrs) })
				halt := runRigs(rigs, func(int) time.Duration { return 15 * time.Millisecond })
				defer halt() // a set-up failure (t.Fatal) in reshard
				log := reshard(t, ctx, cl, migrateFor)
				halt()
				t.Logf("faults: %s", strings.Join(log, "; "))
				checkRigs(t, rigs, "resharding, failover", cd.name+", "+mode, reshardFaults)
			})
		}
	}
}

// reshard is TestReshardRun's nemesis: it moves the slots of "res" and
// "res2" (every rig's names) between masters for migrateFor, then fails
// over the master of "res" on request (CLUSTER FAILOVER on its replica),
// then kills the master of "res2", waits for its replica to take over,
// restarts it (it rejoins as a replica), and moves slots for a second
// more. It returns what it did.
func reshard(t *testing.T, ctx context.Context, cl *redistest.Cluster, migrateFor time.Duration) []string {
	var log []string
	note := func(format string, a ...any) { log = append(log, fmt.Sprintf(format, a...)) }
	slots := [2]int{}
	for i, name := range []string{"res", "res2"} {
		s, err := cl.Slot(ctx, keyspace.KeyBase("", name))
		if err != nil {
			t.Fatal(err)
		}
		slots[i] = s
	}
	moves := 0
	migrateUntil := func(end time.Time) {
		for i := 0; time.Now().Before(end); i++ {
			slot := slots[i%2]
			from, err := cl.Owner(ctx, 0, slot)
			if err != nil {
				t.Fatal(err)
			}
			to := (from + 1 + i%2) % len(cl.Nodes)
			if err := cl.BeginMigration(ctx, slot, from, to); err != nil {
				t.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond)
			if _, err := cl.MoveKeys(ctx, slot, from, to); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndMigration(ctx, slot, from, to); err != nil {
				t.Fatal(err)
			}
			moves++
			time.Sleep(time.Duration(100+(i*37)%150) * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond)
	migrateUntil(time.Now().Add(migrateFor))
	note("%d slot moves", moves)

	// A failover on request: the replica takes over once it has every
	// write of its master.
	owner, err := cl.Owner(ctx, 0, slots[0])
	if err != nil {
		t.Fatal(err)
	}
	old, replica := cl.Addrs[owner], cl.Replicas[owner][0]
	if _, err := replica.Do(ctx, "CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", replica.Addr, err)
	}
	start := time.Now()
	waitMaster(t, ctx, cl, replica, false)
	note("manual failover of %s to %s in %v", old, replica.Addr, time.Since(start).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)

	// A master killed: its replica takes over after the node timeout.
	owner, err = cl.Owner(ctx, 0, slots[1])
	if err != nil {
		t.Fatal(err)
	}
	victim, replica := cl.Nodes[owner], cl.Replicas[owner][0]
	victim.Kill()
	start = time.Now()
	waitMaster(t, ctx, cl, replica, true)
	note("%s killed, %s master after %v", victim.Addr, replica.Addr, time.Since(start).Round(time.Millisecond))
	victim.Restart(t)
	waitMaster(t, ctx, cl, replica, false)
	note("%s back as a replica after %v", victim.Addr, time.Since(start).Round(time.Millisecond))
	moves = 0
	migrateUntil(time.Now().Add(time.Second))
	note("%d more slot moves", moves)
	return log
}

// waitMaster waits until s is a master and the cluster's roles settle:
// 3 masters, each with a connected replica but (when a master was killed
// and not yet restarted) the one s replaced.
func waitMaster(t *testing.T, ctx context.Context, cl *redistest.Cluster, s *redistest.Server, killed bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cl.ReadRoles(ctx, time.Second)
		if err == nil {
			i := slices.Index(cl.Addrs, s.Addr)
			settled := i >= 0 && len(cl.Nodes) == 3
			for j := range cl.Nodes {
				settled = settled && (len(cl.Replicas[j]) > 0 || killed && j == i)
			}
			if settled {
				return
			}
			err = fmt.Errorf("masters %v, replicas per master %v", cl.Addrs, replicaCounts(cl))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not a master of a settled cluster after 30 s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaCounts is how many replicas each master of cl has.
func replicaCounts(cl *redistest.Cluster) []int {
	n := make([]int, len(cl.Replicas))
	for i, r := range cl.Replicas {
		n[i] = len(r)
	}
	return n
}

// primRigs makes a rig for every primitive of prims, the ith with opts(i)
// and TTL ttl, each of its workers a client of its own made by client (and
// a primitives.Client of its own over it).
func primRigs(t *testing.T, ttl time.Duration, opts func(i int) []primitives.Option, client func() backend.Backend) []*rig {
	var rigs []*rig
	for i, p := range prims {
		r := &rig{limit: p.limit, ttl: ttl, hist: &history{failures: map[string]int{}}}
		for w := 0; w < workers; w++ {
			acq, _, excl, err := p.open(clienttest.For(t, client()), w, opts(i)...)
			if err != nil {
				t.Fatal(err)
			}
			r.acquire, r.excl = append(r.acquire, acq), append(r.excl, excl)
		}
		rigs = append(rigs, r)
	}
	return rigs
}

// runRigs starts every worker of rigs, worker w holding each grant for
// hold(w), and returns the function that stops them and waits for them
// (once; later calls return at once).
func runRigs(rigs []*rig, hold func(w int) time.Duration) (halt func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range rigs {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.work(w, func() time.Duration { return hold(w) }, stop)
			}()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { close(stop); wg.Wait() }) }
}

// checkRigs checks each rig of primRigs (rig.check, fences across epochs),
// a subtest per primitive, adding its row to RELIABILITY.md.
func checkRigs(t *testing.T, rigs []*rig, scenario, driver, faults string) {
	for i, r := range rigs {
		t.Run(prims[i].name, func(t *testing.T) {
			v := r.check(t, true)
			table.mu.Lock()
			table.rows = append(table.rows, row{scenario, driver, prims[i].name, r.hist.ops, faults, v})
			table.mu.Unlock()
		})
	}
}
