package rueidis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/contracttest"
)

// TestConformance runs the conformance suite through the rueidis adapter
// on every deployment: miniredis, redis-server, a Cluster, Sentinel.
func TestConformance(t *testing.T) {
	contracttest.RunDeployments(t, func(s contracttest.Server) contracttest.Harness { return harness{s} })
}

// harness connects rueidis clients to a Server.
type harness struct{ contracttest.Server }

func (h harness) option() rd.ClientOption {
	switch h.Kind() {
	case "sentinel":
		return rd.ClientOption{InitAddress: h.Addrs(), Sentinel: rd.SentinelOption{MasterSet: contracttest.SentinelMaster}}
	case "miniredis": // miniredis needs both
		return rd.ClientOption{InitAddress: h.Addrs(), DisableCache: true, AlwaysRESP2: true}
	}
	return rd.ClientOption{InitAddress: h.Addrs()} // a Cluster is found out by rueidis itself
}

func (h harness) NewClient(t testing.TB) contracttest.Client {
	raw, err := rd.NewClient(h.option())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	c := countRueidis{Client: raw, n: &n}
	var once sync.Once
	closeFn := func() error { once.Do(c.Close); return nil }
	t.Cleanup(func() { closeFn() })
	return contracttest.Client{Backend: lrueidis.New(c), Close: closeFn, Commands: n.Load}
}

// Unreachable connects to a server and then stops it: rueidis refuses to
// create a client for an address that does not answer.
func (h harness) Unreachable(t testing.TB) backend.Backend {
	m := miniredis.RunT(t)
	c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	t.Cleanup(c.Close)
	return lrueidis.New(c)
}

// countRueidis counts the commands a client sends (EVALSHA and EVAL go
// through Do; the dedicated pub/sub connection is not counted, as with
// go-redis).
type countRueidis struct {
	rd.Client
	n *atomic.Int64
}

func (c countRueidis) Do(ctx context.Context, cmd rd.Completed) rd.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countRueidis) DoMulti(ctx context.Context, multi ...rd.Completed) []rd.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}
