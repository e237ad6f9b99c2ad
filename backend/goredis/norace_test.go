//go:build !race

package goredis_test

// raceSlack is added to the slack under the race detector only.
const raceSlack = 0

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
