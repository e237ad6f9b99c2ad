package primitives

import (
	"testing"
	"time"
)

// TestRedlockReleasedMemoryBounded: what a release of unknown outcome
// remembers (the instances that released, for its retry) is forgotten when
// the outcome is known, and, for a release never retried, by the next
// release of unknown outcome once its lease could no longer be held.
func TestRedlockReleasedMemoryBounded(t *testing.T) {
	r := &redlock{quorum: 2}
	r.cfg.TTL = time.Second
	held, errs := []bool{true, false, false}, []error{nil, nil, nil}
	r.noteReleased("a", held, errs, true)
	if got := r.releasedBefore("a"); len(got) != 3 || !got[0] || got[1] {
		t.Fatalf("after an unknown outcome: %v, want [true false false]", got)
	}
	r.noteReleased("a", held, errs, false)
	if got := r.releasedBefore("a"); got != nil {
		t.Errorf("after a known outcome: %v, want nothing kept", got)
	}
	r.noteReleased("old", held, errs, true)
	r.released["old"] = releasedBy{at: time.Now().Add(-r.cfg.Window() - time.Millisecond), by: r.released["old"].by}
	r.noteReleased("new", held, errs, true)
	if _, ok := r.released["old"]; ok || len(r.released) != 1 {
		t.Errorf("a release never retried, past its window: kept (%d entries), want dropped", len(r.released))
	}
}
