package goredis_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/contracttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// TestConformance runs the conformance suite through the go-redis adapter
// on every deployment: miniredis, redis-server, a Cluster, Sentinel.
func TestConformance(t *testing.T) {
	contracttest.RunDeployments(t, func(s contracttest.Server) contracttest.Harness { return harness{Server: s} })
}

// TestConformanceIgnoringContexts runs it through clients without
// ContextTimeoutEnabled, as most users write them: go-redis then ignores
// context deadlines, and the adapter bounds every call itself. The fast
// lane runs the groups whose calls wait on Redis under a deadline (the
// backend's own contract; give-ups, hung servers among them); the long
// lane all.
func TestConformanceIgnoringContexts(t *testing.T) {
	t.Parallel()
	h := harness{Server: contracttest.StartRedisServer(t), ignoreCtx: true}
	if lane.Long() {
		contracttest.Run(t, h)
		return
	}
	contracttest.RunGroups(t, h, "Backend", "GiveUp")
}

// harness connects go-redis clients to a Server.
type harness struct {
	contracttest.Server
	ignoreCtx bool // single-server clients without ContextTimeoutEnabled
}

func (h harness) options(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: !h.ignoreCtx, DialTimeout: time.Second,
		DialerRetries: 1, PoolSize: 64} // fail fast on a refused dial: the default is 5 tries
}

func (h harness) NewClient(t testing.TB) contracttest.Client {
	var c redis.UniversalClient
	switch h.Kind() {
	case "cluster":
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.Addrs(), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, DialerRetries: 1, PoolSize: 64})
	case "sentinel":
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: contracttest.SentinelMaster,
			SentinelAddrs: h.Addrs(), ContextTimeoutEnabled: true, DialTimeout: time.Second, DialerRetries: 1, PoolSize: 64})
	default:
		c = redis.NewClient(h.options(h.Addrs()[0]))
	}
	var n atomic.Int64
	c.AddHook(countHook{&n})
	t.Cleanup(func() { c.Close() })
	return contracttest.Client{Backend: goredis.New(c, goredis.WithHealthCheck(time.Second)), Close: c.Close, Commands: n.Load}
}

// Unreachable is a client of a loopback address nobody listens on.
func (h harness) Unreachable(t testing.TB) backend.Backend {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := redis.NewClient(h.options(addr))
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

// countHook counts the commands a client sends, pipelined ones included.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}
