package contracttest_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"go.uber.org/goleak"
)

// Every lease watchdog, subscription hub and client the suite starts must
// be gone when it ends. The one exception is rueidis's own: its cluster
// client sleeps 5s after a topology refresh, past Close.
// The fast lane runs parallel tests several at once (lane.Widen).
func TestMain(m *testing.M) {
	lane.Widen()
	leakcheck.Main(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
