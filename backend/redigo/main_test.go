package redigo_test

import (
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
)

// Every subscription, lease renewer and abandoned call a test starts must
// be gone when it ends.
func TestMain(m *testing.M) { leakcheck.Main(m) }
