//go:build !race

package rueidis_test

// raceEnabled: the race detector is off (see resptest.Driver).
const raceEnabled = false
