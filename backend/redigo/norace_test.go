//go:build !race

package redigo_test

// raceSlack is added to the slack under the race detector only.
const raceSlack = 0
