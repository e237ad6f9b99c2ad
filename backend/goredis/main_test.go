package goredis_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
)

// Every subscription hub, lease renewer and client a test starts must be
// gone when it ends.
// The fast lane runs parallel tests several at once (lane.Widen).
func TestMain(m *testing.M) {
	lane.Widen()
	leakcheck.Main(m)
}
