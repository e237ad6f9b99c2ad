// Package leakcheck is the goroutine-leak check of the test packages: like
// goleak.VerifyTestMain, but it gives bounded background work time to end
// first. A give-back retried in the background (at most about a second),
// a driver's re-dial probe after its server went away, and the goroutine
// with which a rueidis or valkey-go Cluster client closes the connections a
// slot-map refresh replaced (5 s after the refresh: a slot moved) outlive
// the test that started them by design; a leak does not end at all.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Settle is how long the check waits for goroutines to end.
const Settle = 6 * time.Second

// Main runs the tests, then fails the run if goroutines other than those
// opts ignore are still alive Settle after the tests ended.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		code = Check(opts...)
	}
	os.Exit(code)
}

// Check reports (and returns 1) when goroutines other than those opts
// ignore are still alive after Settle; 0 otherwise.
func Check(opts ...goleak.Option) int {
	var err error
	for deadline := time.Now().Add(Settle); ; time.Sleep(50 * time.Millisecond) {
		if err = goleak.Find(opts...); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}
