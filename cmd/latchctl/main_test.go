package main

import (
	"os"
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
)

// The demo's traders, hubs and clients must all be gone when it returns.
// With LATCHCTL_TEST_MAIN=1 the test binary is latchctl itself (see
// latchctlProcess): its arguments are latchctl's.
func TestMain(m *testing.M) {
	if os.Getenv("LATCHCTL_TEST_MAIN") == "1" {
		main()
	}
	leakcheck.Main(m)
}
