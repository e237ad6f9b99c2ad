package main

import (
	"os"
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
)

// The demo's traders, hubs and clients must all be gone when it returns.
// With LATCHCTL_TEST_MAIN=1 the test binary is latchctl itself (see
// latchctlProcess): its arguments are latchctl's. With LATCHCTL_TEST_HOLD
// set it is a process that holds a lock (holdMain).
func TestMain(m *testing.M) {
	if os.Getenv("LATCHCTL_TEST_MAIN") == "1" {
		main()
	}
	if os.Getenv("LATCHCTL_TEST_HOLD") != "" {
		holdMain()
	}
	leakcheck.Main(m)
}
