package primitives

import (
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
)

// No lease watchdog or timer goroutine may outlive the tests.
func TestMain(m *testing.M) { leakcheck.Main(m) }
