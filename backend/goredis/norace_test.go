//go:build !race

package goredis_test

// raceSlack is added to the slack under the race detector only.
const raceSlack = 0
