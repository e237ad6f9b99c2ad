package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master name the sentinels of StartSentinel monitor.
const SentinelMaster = "latchkit"

// Sentinel is a Sentinel-managed pair on loopback: a master, one replica
// and three sentinels (quorum 2) that fail over one second after the
// master stops answering.
type Sentinel struct {
	Master    *Server
	Replica   *Server
	Sentinels []*Server
	// Addrs are the sentinels' addresses, for a client's SentinelAddrs.
	Addrs []string
}

// StartSentinel starts a master, a replica in sync with it and three
// sentinels that all see both and each other, and stops them when t ends.
// The timings follow ../shared/NOTES.md: replication without the 5s
// diskless-sync delay, down-after 1s, failover-timeout 3s.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	Require(t, "redis-sentinel")
	start := time.Now()
	s := &Sentinel{}
	s.Master = Start(t, "--repl-diskless-sync-delay", "0")
	s.Replica = Start(t, "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitInfo(ctx, t, s.Master, "replication", "connected_slaves:1")
	waitInfo(ctx, t, s.Replica, "replication", "master_link_status:up")
	for i := 0; i < 3; i++ {
		s.Sentinels = append(s.Sentinels, startSentinel(t, s.Master.Port))
		s.Addrs = append(s.Addrs, s.Sentinels[i].Addr)
	}
	// Every sentinel must know the replica and the two other sentinels,
	// or a failover started now could not be agreed on or would find no
	// replica to promote.
	for _, sn := range s.Sentinels {
		for {
			v, err := sn.Do(ctx, "SENTINEL", "MASTER", SentinelMaster)
			f := fields(v)
			if err == nil && f["num-slaves"] == "1" && f["num-other-sentinels"] == "2" {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("sentinel %s did not see the replica and the other sentinels: %v %v", sn.Addr, f, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("sentinel topology (master, replica, 3 sentinels) ready in %v", time.Since(start).Round(time.Millisecond))
	return s
}

// startSentinel starts redis-server in sentinel mode from a config file it
// may rewrite, monitoring the master on masterPort.
func startSentinel(t testing.TB, masterPort int) *Server {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 3000
sentinel parallel-syncs %[1]s 1
`, SentinelMaster, masterPort)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, dir, []string{conf, "--sentinel"}, nil)
}

// MasterAddr asks the sentinels which address is the master now: the one
// most of them name.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	votes := map[string]int{}
	var lastErr error
	for _, sn := range s.Sentinels {
		v, err := sn.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if err != nil {
			lastErr = err
			continue
		}
		if a, ok := v.([]any); ok && len(a) == 2 {
			votes[fmt.Sprint(a[0])+":"+fmt.Sprint(a[1])]++
		}
	}
	best, n := "", 0
	for addr, c := range votes {
		if c > n {
			best, n = addr, c
		}
	}
	if n < 2 {
		return "", fmt.Errorf("no master named by a majority of sentinels (%v, last error %v)", votes, lastErr)
	}
	return best, nil
}

// WaitFailover waits until a majority of sentinels name an address other
// than old as the master and that server answers as a master, and returns
// the new master's address.
func (s *Sentinel) WaitFailover(ctx context.Context, t testing.TB, old string) string {
	t.Helper()
	for {
		addr, err := s.MasterAddr(ctx)
		if err == nil && addr != old {
			for _, srv := range []*Server{s.Master, s.Replica} {
				if srv.Addr != addr {
					continue
				}
				v, err := srv.Do(ctx, "ROLE")
				if a, ok := v.([]any); err == nil && ok && len(a) > 0 && a[0] == "master" {
					return addr
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no failover away from %s: %v", old, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitInfo polls INFO section on srv until it contains want.
func waitInfo(ctx context.Context, t testing.TB, srv *Server, section, want string) {
	t.Helper()
	for {
		v, err := srv.Do(ctx, "INFO", section)
		if err == nil && strings.Contains(fmt.Sprint(v), want) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: INFO %s never showed %q: %v\n%s", srv.Addr, section, want, err, srv.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fields turns a flat [k1 v1 k2 v2 ...] reply (or a RESP3 map) into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, e := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(e)
		}
	}
	return out
}

// CutOffReplica makes the replica fall behind its master: it is stopped
// (SIGSTOP) and its replication link killed on the master's side (CLIENT
// KILL TYPE replica), so that what the master writes from then on is not
// even in the replica's socket when it is resumed. On error the replica
// is resumed.
func (s *Sentinel) CutOffReplica(ctx context.Context) error {
	s.Replica.Pause()
	if _, err := s.Master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		s.Replica.Resume()
		return fmt.Errorf("killing the replica's link on %s: %w", s.Master.Addr, err)
	}
	return nil
}
