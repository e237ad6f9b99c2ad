//go:build race

package redigo_test

import "time"

// raceSlack is added to the slack under the race detector, whose
// instrumented code runs several times slower on a busy machine: the
// failures the bound catches are seconds late, not a hundred milliseconds.
const raceSlack = 200 * time.Millisecond
