package primitives

import (
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
)

// No lease watchdog or timer goroutine may outlive the tests. The fast
// lane runs the scenarios marked parallel several at once (lane.Widen).
func TestMain(m *testing.M) {
	lane.Widen()
	leakcheck.Main(m)
}
