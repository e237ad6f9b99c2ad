package retry_test

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/retry"
)

// Issue 38, finding 5: retry's functions with bad input (nil policies,
// zero and negative durations and counts) never panic. A policy built
// over a nil one is nil, which primitives.WithRetry refuses (ErrInvalid);
// a negative delay is none.
func TestNoPanicOnBadInput(t *testing.T) {
	// run makes a backoff of p and draws a few delays, none negative.
	run := func(t *testing.T, what string, p retry.Policy) {
		t.Helper()
		apicover.Calm(t, what, func() error {
			b := p()
			for range 3 {
				if d := b.NextBackOff(); d < 0 && d != backoff.Stop {
					t.Errorf("%s: delay %v", what, d)
				}
			}
			b.Reset()
			return nil
		})
	}
	apicover.Check(t, ".", map[string]func(t *testing.T){
		"Constant": func(t *testing.T) {
			for _, d := range []time.Duration{0, -1, -1 << 63} {
				run(t, "Constant", retry.Constant(d))
			}
		},
		"Exponential": func(t *testing.T) { run(t, "Exponential", retry.Exponential()) },
		"MaxAttempts": func(t *testing.T) {
			for _, n := range []int{0, -1, -1 << 63} {
				run(t, "MaxAttempts(n)", retry.MaxAttempts(retry.Exponential(), n))
			}
			var p retry.Policy
			apicover.Calm(t, "MaxAttempts(nil, 3)", func() error { p = retry.MaxAttempts(nil, 3); return nil })
			if p != nil {
				t.Error("MaxAttempts(nil, 3) is not nil")
			}
		},
		"MaxElapsed": func(t *testing.T) {
			for _, d := range []time.Duration{0, -1, -1 << 63} {
				run(t, "MaxElapsed(d)", retry.MaxElapsed(retry.Exponential(), d))
			}
			var p retry.Policy
			apicover.Calm(t, "MaxElapsed(nil, 1s)", func() error { p = retry.MaxElapsed(nil, time.Second); return nil })
			if p != nil {
				t.Error("MaxElapsed(nil, 1s) is not nil")
			}
		},
	})
}
