//go:build !race

package valkey_test

// raceEnabled: the race detector is off (see resptest.Driver).
const raceEnabled = false
