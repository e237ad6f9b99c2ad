package primitives

import (
	"testing"

	"go.uber.org/goleak"
)

// No lease watchdog or timer goroutine may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
