//go:build race

package valkey_test

// raceEnabled: the race detector is on (see resptest.Driver).
const raceEnabled = true
