package contracttest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every lease watchdog, subscription hub and client the suite starts must
// be gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
