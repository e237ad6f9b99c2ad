package valkey_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
	"go.uber.org/goleak"
)

// Every subscription hub, lease renewer and client a test starts must be
// gone when it ends; the one exception is valkey-go's own: its cluster client
// sleeps 5s after a topology refresh, past Close.
func TestMain(m *testing.M) {
	leakcheck.Main(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}
