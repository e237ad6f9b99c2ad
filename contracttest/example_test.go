package contracttest_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/contracttest"
)

// harness says how a driver, here go-redis, connects to a Server the suite
// starts. The Server it embeds does the rest of the Harness: it moves its
// clock, drops its subscribers and flushes its scripts.
type harness struct{ contracttest.Server }

var _ contracttest.Harness = harness{}

func (h harness) NewClient(t testing.TB) contracttest.Client {
	opts := &redis.UniversalOptions{Addrs: h.Addrs(), ContextTimeoutEnabled: true} // a Cluster's masters
	if h.Kind() == "sentinel" {
		opts.MasterName = contracttest.SentinelMaster // and the Addrs are sentinels
	}
	c := redis.NewUniversalClient(opts)
	t.Cleanup(func() { c.Close() })
	return contracttest.Client{Backend: goredis.New(c), Close: c.Close}
}

// Unreachable is a client of a loopback port nobody listens on.
func (h harness) Unreachable(t testing.TB) backend.Backend {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

// An adapter runs the suite from one test of its own, which gives the
// suite a harness for each Server it starts:
//
//	func TestConformance(t *testing.T) {
//		contracttest.RunDeployments(t, func(s contracttest.Server) contracttest.Harness {
//			return harness{s}
//		})
//	}
//
// RunDeployments runs the whole suite (Run) on each of these deployments,
// those marked long only when LATCHKIT_LONG=1; RunGroups runs part of it.
// (The suite needs a *testing.T, so an Example cannot run it; a test of
// this package runs it through this harness.)
func Example() {
	for _, d := range contracttest.Deployments {
		fmt.Println(d.Kind, "long:", d.Long)
	}
	// Output:
	// miniredis long: false
	// redis-server long: false
	// cluster long: true
	// sentinel long: true
}
