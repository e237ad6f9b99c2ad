package valkey_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/contracttest"
)

// TestConformance runs the conformance suite through the valkey-go adapter
// on every deployment: miniredis, redis-server, a Cluster, Sentinel.
func TestConformance(t *testing.T) {
	contracttest.RunDeployments(t, func(s contracttest.Server) contracttest.Harness { return harness{s} })
}

// harness connects valkey-go clients to a Server.
type harness struct{ contracttest.Server }

func (h harness) option() vk.ClientOption {
	o := vk.ClientOption{InitAddress: h.Addrs()} // a Cluster is found out by valkey-go itself
	switch h.Kind() {
	case "sentinel":
		o.Sentinel = vk.SentinelOption{MasterSet: contracttest.SentinelMaster}
	case "miniredis": // miniredis needs both
		o.DisableCache, o.AlwaysRESP2 = true, true
	}
	return o
}

func (h harness) NewClient(t testing.TB) contracttest.Client {
	raw, err := vk.NewClient(h.option())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	c := counting{Client: raw, n: &n}
	var once sync.Once
	closeFn := func() error { once.Do(c.Close); return nil }
	t.Cleanup(func() { closeFn() })
	return contracttest.Client{Backend: lvalkey.New(c), Close: closeFn, Commands: n.Load}
}

// Unreachable connects to a server and then stops it: valkey-go refuses
// to create a client for an address that does not answer.
func (h harness) Unreachable(t testing.TB) backend.Backend {
	m := miniredis.RunT(t)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	t.Cleanup(c.Close)
	return lvalkey.New(c)
}

// counting counts the commands a client sends (EVALSHA and EVAL go
// through Do and DoMulti; the dedicated pub/sub connection is not
// counted).
type counting struct {
	vk.Client
	n *atomic.Int64
}

func (c counting) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c counting) DoMulti(ctx context.Context, multi ...vk.Completed) []vk.ValkeyResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}
