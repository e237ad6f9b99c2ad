//go:build race

package goredis_test

import "time"

// raceSlack is added to the slack under the race detector, whose
// instrumented code runs several times slower on a busy machine: the
// failures the bound catches are seconds late, not a hundred milliseconds.
const raceSlack = 200 * time.Millisecond

// raceEnabled: allocation counts mean nothing under the race detector,
// which allocates on its own behalf (and not the same count every call).
const raceEnabled = true
