package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The demo's traders, hubs and clients must all be gone when it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
