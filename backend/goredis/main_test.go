package goredis_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every subscription hub, lease renewer and client a test starts must be
// gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
