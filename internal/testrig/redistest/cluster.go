package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster on loopback: its masters, and their
// replicas when it has any.
type Cluster struct {
	Addrs []string  // the masters' addresses, as Nodes
	Nodes []*Server // the masters
	// Replicas[i] are the replicas of Nodes[i] (none by StartCluster).
	Replicas [][]*Server
	all      []*Server // every node, masters and replicas
}

// StartCluster starts masters cluster-enabled servers, joins them with
// redis-cli --cluster create, waits until every node reports
// cluster_state:ok, and stops them when t ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return startCluster(t, masters, 0)
}

// StartClusterWithReplicas is StartCluster with replicas replicas per
// master, each connected and in sync with its master when it returns.
func StartClusterWithReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	return startCluster(t, masters, replicas)
}

func startCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	Require(t, "redis-cli")
	start := time.Now()
	c := &Cluster{}
	var all []*Server
	for i := 0; i < masters*(1+replicas); i++ {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		all = append(all, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range all {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range all {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := s.Do(ctx, "CLUSTER", "INFO")
			cancel()
			if err == nil && strings.Contains(fmt.Sprint(v), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok after 30s: %v %v", s.Addr, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.all = all
	if err := c.ReadRoles(context.Background(), time.Until(deadline)); err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != masters || len(c.all)-len(c.Nodes) != masters*replicas {
		t.Fatalf("cluster of %d masters and %d replicas, want %d and %d", len(c.Nodes), len(c.all)-len(c.Nodes), masters, masters*replicas)
	}
	// A replica that calls itself connected (ROLE) may not yet be one its
	// master counts for WAIT: a test's first replicated write then saw
	// "WAIT confirmed 0 of 1 replicas" on a loaded machine.
	for _, m := range c.Nodes {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		waitInSync(ctx, t, m, replicas)
		cancel()
	}
	t.Logf("cluster of %d masters (%d replicas each) ready in %v", masters, replicas, time.Since(start).Round(time.Millisecond))
	return c
}

// Do runs one command on every node.
func (c *Cluster) Do(ctx context.Context, args ...any) error {
	for _, s := range c.Nodes {
		if _, err := s.Do(ctx, args...); err != nil {
			return fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return nil
}

// ID is node i's cluster node id (CLUSTER MYID).
func (c *Cluster) ID(ctx context.Context, i int) (string, error) {
	v, err := c.Nodes[i].Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}

// Slot is the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	v, err := c.Nodes[0].Do(ctx, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("CLUSTER KEYSLOT %q: %v", key, v)
	}
	return int(n), nil
}

// SlotRange is a range of hash slots, Lo to Hi inclusive, and the index
// in Nodes of the master that serves it (-1 for one that is not in Nodes,
// Addr: a master the cluster has not yet seen fail, say).
type SlotRange struct {
	Lo, Hi int
	Node   int
	Addr   string
}

// Ranges is which master serves which slots, as master from says
// (CLUSTER SLOTS).
func (c *Cluster) Ranges(ctx context.Context, from int) ([]SlotRange, error) {
	v, err := c.Nodes[from].Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	rows, _ := v.([]any)
	var out []SlotRange
	for _, r := range rows {
		f, _ := r.([]any)
		if len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: row %v", r)
		}
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		node, _ := f[2].([]any)
		if len(node) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: row %v", r)
		}
		addr := net.JoinHostPort(fmt.Sprint(node[0]), fmt.Sprint(node[1]))
		out = append(out, SlotRange{Lo: int(lo), Hi: int(hi), Node: slices.Index(c.Addrs, addr), Addr: addr})
	}
	return out, nil
}

// Owner is the index in Nodes of the master that serves slot, as master
// from says (see Ranges).
func (c *Cluster) Owner(ctx context.Context, from, slot int) (int, error) {
	ranges, err := c.Ranges(ctx, from)
	if err != nil {
		return 0, err
	}
	for _, r := range ranges {
		if slot >= r.Lo && slot <= r.Hi {
			if r.Node < 0 {
				return 0, fmt.Errorf("slot %d is served by %s, not a master of %v", slot, r.Addr, c.Addrs)
			}
			return r.Node, nil
		}
	}
	return 0, fmt.Errorf("slot %d is served by no node", slot)
}

// BeginMigration opens the migration of slot from master from to master
// to: to is IMPORTING it, from MIGRATING it (CLUSTER SETSLOT). Until
// EndMigration, from serves the slot's keys it still has, answers ASK for
// a command none of whose keys it has, and TRYAGAIN for a command over
// several keys of which it has some.
func (c *Cluster) BeginMigration(ctx context.Context, slot, from, to int) error {
	fromID, err := c.ID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := c.ID(ctx, to)
	if err != nil {
		return err
	}
	if _, err := c.Nodes[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", c.Addrs[to], err)
	}
	if _, err := c.Nodes[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", c.Addrs[from], err)
	}
	return nil
}

// MoveKeys moves every key of slot from master from to master to
// (CLUSTER GETKEYSINSLOT, then MIGRATE ... KEYS, as redis-cli does), in
// batches of 100, each key keeping its TTL. The slot must be migrating
// (BeginMigration). It returns how many keys it moved.
func (c *Cluster) MoveKeys(ctx context.Context, slot, from, to int) (int, error) {
	host, port, err := net.SplitHostPort(c.Addrs[to])
	if err != nil {
		return 0, err
	}
	moved := 0
	for {
		v, err := c.Nodes[from].Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100)
		if err != nil {
			return moved, err
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			return moved, nil
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		args = append(args, keys...)
		if _, err := c.Nodes[from].Do(ctx, args...); err != nil {
			return moved, fmt.Errorf("MIGRATE from %s to %s: %w", c.Addrs[from], c.Addrs[to], err)
		}
		moved += len(keys)
	}
}

// EndMigration gives slot to master to (CLUSTER SETSLOT ... NODE), told
// to to first, then to from, as redis-cli does: from then on the former
// owner answers MOVED for the slot. The other masters learn it from the
// cluster bus, and are told too, as a courtesy that speeds that up: each
// for 100 ms at most, whatever it answers (it may be paused or down).
func (c *Cluster) EndMigration(ctx context.Context, slot, from, to int) error {
	toID, err := c.ID(ctx, to)
	if err != nil {
		return err
	}
	for _, i := range []int{to, from} {
		if _, err := c.Nodes[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", c.Addrs[i], err)
		}
	}
	for i := range c.Nodes {
		if i != to && i != from {
			octx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, _ = c.Nodes[i].Do(octx, "CLUSTER", "SETSLOT", slot, "NODE", toID)
			cancel()
		}
	}
	return nil
}

// MigrateSlot moves slot, and every key in it, from master from to master
// to: BeginMigration, MoveKeys, EndMigration.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, from, to int) error {
	if err := c.BeginMigration(ctx, slot, from, to); err != nil {
		return err
	}
	if _, err := c.MoveKeys(ctx, slot, from, to); err != nil {
		return err
	}
	return c.EndMigration(ctx, slot, from, to)
}

// ReadRoles sets Nodes, Addrs and Replicas from what every node says it is
// (ROLE), as a failover changes it: it waits, up to within, until every
// node is a master or a replica whose link to its master is up, and every
// replica follows a master of the cluster. A node that is down (killed,
// not restarted) is left out.
func (c *Cluster) ReadRoles(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := c.readRoles(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) readRoles(ctx context.Context) error {
	var nodes []*Server
	masterOf := map[*Server]string{}
	for _, s := range c.all {
		if s.Pid() == 0 {
			continue // down
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := s.Do(rctx, "ROLE")
		cancel()
		role, _ := v.([]any)
		switch {
		case err == nil && len(role) > 0 && role[0] == "master":
			nodes = append(nodes, s)
		case err == nil && len(role) >= 4 && role[0] == "slave" && role[3] == "connected":
			masterOf[s] = net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2]))
		default:
			return fmt.Errorf("cluster node %s: ROLE %v %v, neither a master nor a connected replica", s.Addr, v, err)
		}
	}
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr
	}
	replicas := make([][]*Server, len(nodes))
	for s, m := range masterOf {
		i := slices.Index(addrs, m)
		if i < 0 {
			return fmt.Errorf("replica %s follows %s, not a master of the cluster %v", s.Addr, m, addrs)
		}
		replicas[i] = append(replicas[i], s)
	}
	c.Nodes, c.Addrs, c.Replicas = nodes, addrs, replicas
	return nil
}

// waitInSync polls INFO replication on master until it has replicas
// replicas online and each has acknowledged the master's offset.
func waitInSync(ctx context.Context, t testing.TB, master *Server, replicas int) {
	t.Helper()
	for {
		v, err := master.Do(ctx, "INFO", "replication")
		info := fmt.Sprint(v)
		if err == nil && inSync(info) == replicas {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %d replicas not online and caught up: %v\n%s", master.Addr, replicas, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inSync counts the replicas an INFO replication reply shows online at
// the master's offset.
func inSync(info string) int {
	offset, n := "", 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			offset = v
		}
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "state=online") {
			continue
		}
		if strings.Contains(line+",", ",offset="+offset+",") {
			n++
		}
	}
	return n
}

// Describe is every node's ROLE and, for a master, its replicas as INFO
// replication shows them: what a test prints when replication did not do
// what it expected.
func (c *Cluster) Describe(ctx context.Context) string {
	var b strings.Builder
	for _, s := range c.all {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		role, err := s.Do(rctx, "ROLE")
		fmt.Fprintf(&b, "%s ROLE %v %v\n", s.Addr, role, err)
		if r, ok := role.([]any); ok && len(r) > 0 && r[0] == "master" {
			info, _ := s.Do(rctx, "INFO", "replication")
			for _, line := range strings.Split(fmt.Sprint(info), "\n") {
				if line = strings.TrimSpace(line); strings.HasPrefix(line, "slave") || strings.HasPrefix(line, "master_repl_offset") {
					fmt.Fprintf(&b, "  %s\n", line)
				}
			}
		}
		cancel()
	}
	return b.String()
}
