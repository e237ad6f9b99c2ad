package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters without replicas, on loopback.
type Cluster struct {
	Addrs []string
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled servers, joins them with
// redis-cli --cluster create, waits until every node reports
// cluster_state:ok, and stops them when t ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	Require(t, "redis-cli")
	start := time.Now()
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Nodes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := s.Do(ctx, "CLUSTER", "INFO")
			cancel()
			if err == nil && strings.Contains(fmt.Sprint(v), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok after 20s: %v %v", s.Addr, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("cluster of %d masters ready in %v", masters, time.Since(start).Round(time.Millisecond))
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
