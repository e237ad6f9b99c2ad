package middleware_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
)

// Every lease watchdog and client the tests start must be gone when they
// end.
func TestMain(m *testing.M) { leakcheck.Main(m) }
