package goredis

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestHonoursContext: calls are made directly only on go-redis's own
// clients created with ContextTimeoutEnabled; any other client, a wrapper
// of one included, gets its calls bounded by the adapter.
func TestHonoursContext(t *testing.T) {
	const addr = "127.0.0.1:1" // never dialed: the clients connect lazily
	type wrapper struct{ redis.UniversalClient }
	for _, on := range []bool{false, true} {
		clients := map[string]redis.UniversalClient{
			"Client":        redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on}),
			"ClusterClient": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: on}),
			"FailoverClient": redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: on}),
			"Ring":    redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: on}),
			"wrapper": wrapper{redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on})},
		}
		for name, c := range clients {
			want := on && name != "wrapper"
			if got := New(c).(*adapter).direct; got != want {
				t.Errorf("%s with ContextTimeoutEnabled %v: direct %v, want %v", name, on, got, want)
			}
			if err := c.Close(); err != nil {
				t.Errorf("%s: close: %v", name, err)
			}
		}
	}
}
