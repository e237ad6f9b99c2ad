package handoff

import (
	"testing"
	"time"
)

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	start := time.Now()
	r.Granted(0, start, 0)
	r.Releasing(0)
	r.Granted(1, start, 1) // a hand-over
	r.Granted(2, start, 0) // while 1 holds: a violation (and, after 0's release, a hand-over)
	r.Releasing(2)
	r.Granted(2, start, 0) // straight back
	r.Failed()
	got := r.Result()
	if got.Acquisitions != 4 || got.Handoffs != 2 || got.SelfReacq != 1 || got.Violations != 1 || got.GaveUp != 1 || got.ReleaseErrs != 1 || len(got.Handoff) != 2 {
		t.Fatalf("%+v", got)
	}
}

func TestQuantileAndMedian(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if q := Quantile(ds, 0.5); q != 3 {
		t.Errorf("p50 %v", q)
	}
	if q := Quantile(ds, 1); q != 5 {
		t.Errorf("p100 %v", q)
	}
	if Quantile(nil, 0.5) != 0 || Median(nil) != 0 {
		t.Error("empty")
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median %v", m)
	}
}
