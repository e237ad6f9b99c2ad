package main

import (
	"testing"

	"github.com/latchkit/latchkit/internal/leakcheck"
)

// The demo's traders, hubs and clients must all be gone when it returns.
func TestMain(m *testing.M) { leakcheck.Main(m) }
