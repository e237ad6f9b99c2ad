package retry_test

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"github.com/latchkit/latchkit/retry"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestExponentialDefaults(t *testing.T) {
	b := retry.Exponential()()
	eb, ok := b.(*backoff.ExponentialBackOff)
	if !ok {
		t.Fatalf("Exponential()() is %T, want *backoff.ExponentialBackOff", b)
	}
	if eb.InitialInterval != 5*time.Millisecond || eb.MaxInterval != 500*time.Millisecond ||
		eb.Multiplier != 2 || eb.RandomizationFactor != 0.5 || eb.MaxElapsedTime != 0 {
		t.Fatalf("defaults = initial %v max %v mult %v jitter %v maxElapsed %v",
			eb.InitialInterval, eb.MaxInterval, eb.Multiplier, eb.RandomizationFactor, eb.MaxElapsedTime)
	}
	// Delays grow by 2 from 5ms, capped at 500ms, each within ±50%, and the
	// policy never gives up on its own.
	interval := 5 * time.Millisecond
	for i := range 200 {
		d := b.NextBackOff()
		if d == backoff.Stop {
			t.Fatalf("delay %d: Stop; Exponential must never give up", i)
		}
		lo, hi := interval/2, interval*3/2
		if d < lo || d > hi {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, lo, hi)
		}
		interval = min(interval*2, 500*time.Millisecond)
	}
}

func TestConstant(t *testing.T) {
	b := retry.Constant(7 * time.Millisecond)()
	for range 10 {
		if d := b.NextBackOff(); d != 7*time.Millisecond {
			t.Fatalf("Constant(7ms) gave %v", d)
		}
	}
}

func TestMaxAttemptsPolicy(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 2, 5} {
		b := retry.MaxAttempts(retry.Constant(time.Millisecond), n)()
		waits := 0
		for b.NextBackOff() != backoff.Stop {
			waits++
			if waits > 100 {
				t.Fatalf("n=%d: never stops", n)
			}
		}
		if want := max(n-1, 0); waits != want {
			t.Errorf("MaxAttempts(_, %d) allowed %d waits, want %d", n, waits, want)
		}
	}
}

func TestMaxElapsedPolicy(t *testing.T) {
	b := retry.MaxElapsed(retry.Constant(time.Hour), 50*time.Millisecond)()
	if d := b.NextBackOff(); d <= 0 || d > 50*time.Millisecond {
		t.Fatalf("first delay %v, want in (0, 50ms]: capped by the time left", d)
	}
	time.Sleep(60 * time.Millisecond)
	if d := b.NextBackOff(); d != backoff.Stop {
		t.Fatalf("after the limit: %v, want Stop", d)
	}
	b.Reset()
	if d := b.NextBackOff(); d == backoff.Stop {
		t.Fatal("Reset must restart the clock")
	}

	// A short delay passes through unchanged.
	b = retry.MaxElapsed(retry.Constant(time.Millisecond), time.Hour)()
	if d := b.NextBackOff(); d != time.Millisecond {
		t.Fatalf("delay %v, want 1ms", d)
	}
	// The wrapped policy giving up ends it too.
	b = retry.MaxElapsed(retry.MaxAttempts(retry.Constant(time.Millisecond), 1), time.Hour)()
	if d := b.NextBackOff(); d != backoff.Stop {
		t.Fatalf("delay %v, want Stop from the inner policy", d)
	}
}
