package kit

import (
	"testing"
	"time"
)

// Issue 38, finding 6: a lease at any accepted TTL lives at least half of
// it from the start of the call that granted it on a healthy Redis. Its
// deadline (NewLease) is the attempt's start, which is no earlier than the
// call's, plus the TTL less the drift allowance: the allowance must be at
// most half the TTL for every TTL from MinTTL on.
func TestDriftLeavesHalfTheTTL(t *testing.T) {
	check := func(ttl time.Duration) {
		if left := ttl - Drift(ttl); left < ttl/2 {
			t.Fatalf("ttl %v: the lease lives %v from the call's start (drift allowance %v), less than half the ttl", ttl, left, Drift(ttl))
		}
	}
	for ttl := MinTTL; ttl <= time.Second; ttl += 10 * time.Microsecond {
		check(ttl)
	}
	for _, ttl := range []time.Duration{10 * time.Second, time.Hour, 24 * time.Hour, 1<<63 - 1} {
		check(ttl)
	}
}
