package valkey_test

import (
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// TestAsAndCluster: As hands back the client New was given, and only into
// a *valkey.Client; a client of a single redis-server is no Cluster. (A
// client of miniredis is: miniredis answers CLUSTER SLOTS, so valkey-go,
// like rueidis, makes a cluster client of one node for it.)
func TestAsAndCluster(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := lvalkey.New(c).(interface {
		backend.Unwrapper
		backend.Cluster
	})
	var got vk.Client
	if !b.As(&got) || got != c {
		t.Errorf("As(*valkey.Client) = %v, %v; want true and the client", got, got == c)
	}
	var other *vk.ClientOption
	if b.As(&other) || b.As(got) || b.As(nil) {
		t.Error("As took a target that is no *valkey.Client")
	}
	if b.Cluster() {
		t.Error("a single-server client says it is a Cluster")
	}
}
