package middleware_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every lease watchdog and client the tests start must be gone when they
// end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
