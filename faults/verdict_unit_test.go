package faults_test

import (
	"testing"
	"time"
)

// TestVerdictExcusesStalls: a lateness past the slack is a violation
// unless the scheduler watch saw the process's timers run at least as late
// as the excess while it was due.
func TestVerdictExcusesStalls(t *testing.T) {
	now := time.Now().Add(time.Hour) // clear of any real stall the watch records
	schedWatch.mu.Lock()
	schedWatch.stalls = append(schedWatch.stalls, schedStall{at: now.Add(-50 * time.Millisecond), late: 120 * time.Millisecond})
	schedWatch.mu.Unlock()
	for _, c := range []struct {
		what       string
		at         time.Time
		by         time.Duration
		violations int
	}{
		{"within the slack", now, 100 * time.Millisecond, 0},
		{"late by 250 ms, timers 120 ms late meanwhile", now, 250 * time.Millisecond, 0},
		{"late by 300 ms, timers only 120 ms late meanwhile", now, 300 * time.Millisecond, 1},
		{"late by 250 ms, the stall before it was due", now.Add(time.Second), 250 * time.Millisecond, 1},
	} {
		inner := &testing.T{}
		v := &verdict{t: inner}
		v.late(c.what, c.at, c.by, 150*time.Millisecond)
		if v.violations != c.violations {
			t.Errorf("%s: %d violations, want %d", c.what, v.violations, c.violations)
		}
	}
}
