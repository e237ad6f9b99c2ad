//go:build race

package rueidis_test

// raceEnabled: the race detector is on (see resptest.Driver).
const raceEnabled = true
