package valkey_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"go.uber.org/goleak"
)

// Every subscription hub, lease renewer and client a test starts must be
// gone when it ends; the one exception is valkey-go's own: its cluster client
// sleeps 5s after a topology refresh, past Close.
// The fast lane runs parallel tests several at once (lane.Widen).
func TestMain(m *testing.M) {
	lane.Widen()
	leakcheck.Main(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}
