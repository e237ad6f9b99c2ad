//go:build race

package rueidis_test

import "time"

// raceSlack is added to the slack under the race detector, whose
// instrumented code runs several times slower on a busy machine: the
// failures the bound catches are a dial timeout late.
const raceSlack = 200 * time.Millisecond

// raceEnabled: allocation counts mean nothing under the race detector,
// which allocates for goroutines and synchronization itself.
const raceEnabled = true
