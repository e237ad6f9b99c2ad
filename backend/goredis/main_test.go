package goredis_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
)

// Every subscription hub, lease renewer and client a test starts must be
// gone when it ends.
func TestMain(m *testing.M) { leakcheck.Main(m) }
